"""Messages as text: one document of lines and styled spans, rendered as
Telegram HTML, Slack mrkdwn or plain text, and as Alertmanager's webhook payload.

Every value that came from a database client goes through ``_value``: one line,
capped, encodable; the renderers then escape it for their format, so no
application name or query can become markup, a mention or a second line.
"""

from __future__ import annotations

import enum
import hashlib
import html
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lockwatch.model.incident_text import Said, alert_name
from lockwatch.model.incidents import Resolution
from lockwatch.model.remediation import SQL_LIMIT
from lockwatch.notify.message import Headline, Message, Notice
from lockwatch.text import ELLIPSIS, format_duration, iso_utc, one_line, printable

TELEGRAM_LIMIT = 4096  # characters after entity parsing, counted in UTF-16 units
# Slack cuts text past 40,000 characters; 3,000 visible ones stay readable and,
# even if every one of them is escaped (&amp; is five), far from that limit.
SLACK_LIMIT = 3000
SUMMARY_LIMIT = 500
VALUE_LIMIT = 80
REPLY_LIMIT = 300  # the title in a living message's reply
QUERY_LIMIT = 400  # a client's last query
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing

_HEADLINES = {
    Headline.OPENED: "🔥 OPENED",
    Headline.WORSE: "⬆️ WORSE",
    Headline.REMINDER: "🔁 STILL OPEN",
    Headline.RESOLVED: "✅ RESOLVED",
    Headline.UPDATED: "🔥 OPEN",
}


class Style(enum.Enum):
    PLAIN = "plain"
    BOLD = "bold"
    CODE = "code"
    LINK = "link"


@dataclass(frozen=True, slots=True)
class Span:
    text: str
    style: Style = Style.PLAIN
    url: str = ""  # for links; always one of lockwatch's own


Line = tuple[Span, ...]


def _value(value: object, limit: int = VALUE_LIMIT) -> str:
    return printable(one_line(value, limit))


def utf16_len(text: str) -> int:
    """Telegram counts message length in UTF-16 code units.

    >>> utf16_len("ab"), utf16_len("🔥")
    (2, 2)
    """
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def iso(moment: datetime) -> str:
    return iso_utc(moment) or ""


# -- the document ---------------------------------------------------------------


def flapping_text(message: Message) -> str:
    """ "opened 4 times in 52m" for an incident that reopened, else ""."""
    notice = message.notice
    if notice is None or notice.openings < 2:
        return ""
    span = format_duration((message.created_at - notice.opened_at).total_seconds())
    return f"opened {notice.openings} times in {span}"


def document(message: Message, living: bool = False) -> list[Line]:
    """The message as lines of spans: the headline with the incident's title,
    then its root, impact, findings and next step, then when and the runbook.
    ``living``: the text of a message edited as the incident goes on, headed by
    its state (open or resolved) rather than by why it was sent."""
    notice = message.notice
    if notice is None:
        return [
            (Span("🔔 lockwatch test message", Style.BOLD),),
            (Span(f"Channel {_value(message.channel)} works: lockwatch can reach this chat."),),
            (Span(f"Sent {iso(message.created_at)}"),),
        ]
    # A living message keeps one headline while it lives: updated, then how it ended.
    living_update = living and message.headline is not Headline.RESOLVED
    headline = _HEADLINES[Headline.UPDATED] if living_update else _headline(message, notice)
    lines: list[Line] = [
        (Span(f"{headline}: {_value(notice.title, SUMMARY_LIMIT)}", Style.BOLD),),
        (
            Span(
                f"{notice.severity.value} · {_value(notice.target)} · "
                f"incident {_value(notice.incident)}"
            ),
        ),
    ]
    flaps = flapping_text(message)
    if flaps:
        lines.append((Span(f"🔁 {flaps}"),))
    lines.append(())
    said = [said_line(said) for said in notice.said]
    # Its findings before the next step: what is wrong, then what to do.
    step = next((n for n, s in enumerate(notice.said) if s.label == "next step"), len(said))
    lines.extend(said[:step])
    lines.extend(_finding_lines(message, notice))
    lines.extend(said[step:])
    lines.append(_when_line(message, notice))
    alert = alert_name(notice.kind)
    lines.append((Span("runbook: "), Span(alert, Style.LINK, notice.runbook)))
    return lines


def _headline(message: Message, notice: Notice) -> str:
    """An incident of a target removed from the config is not resolved: nobody looks."""
    if message.headline is Headline.RESOLVED and notice.resolution == Resolution.UNWATCHED:
        return "👁 NO LONGER WATCHED"
    return _HEADLINES[message.headline]


def _finding_lines(message: Message, notice: Notice) -> list[Line]:
    """Each listed finding as "[state] kind · severity · target · subject", then
    its summary: the state is the message's for it (firing when this message is
    the first to tell its kind)."""
    lines: list[Line] = []
    for told in notice.findings:
        if message.headline is Headline.RESOLVED:
            state = "resolved"
        else:
            state = "still firing" if told.before else "firing"
        lines.append(
            (
                Span(f"[{state}] "),
                Span(told.kind, Style.BOLD),
                Span(f" · {told.severity} · {_value(told.where)}"),
            )
        )
        lines.append((Span(f"  {_value(told.summary, SUMMARY_LIMIT)}"),))
    if notice.more > 0:
        lines.append((Span(f"and {notice.more} more finding(s)"),))
    return lines


def said_line(said: Said) -> Line:
    if said.code:
        # The next step's SQL whole (it must run as printed), a client's query cut.
        limit = SQL_LIMIT if said.label == "sql" else QUERY_LIMIT
        return (Span(f"{said.label}: "), Span(_value(said.text, limit), Style.CODE))
    return (Span(f"{said.label}: {_value(said.text, SUMMARY_LIMIT)}"),)


def _when_line(message: Message, notice: Notice) -> Line:
    if message.headline is Headline.RESOLVED:
        end = notice.resolved_at or message.created_at
        lasted = format_duration((end - notice.opened_at).total_seconds())
        how = f" ({_value(notice.resolution)})" if notice.resolution else ""
        return (Span(f"resolved{how} after {lasted} (opened {iso(notice.opened_at)})"),)
    lasted = format_duration((message.created_at - notice.opened_at).total_seconds())
    return (Span(f"open since {iso(notice.opened_at)} ({lasted})"),)


def reply_lines(message: Message) -> list[Line]:
    """The short reply in a living message's thread: why a phone should ring."""
    notice = message.notice
    assert notice is not None
    title = _value(notice.title, REPLY_LIMIT)
    flaps = flapping_text(message)
    if message.headline is Headline.RESOLVED:
        end = notice.resolved_at or message.created_at
        lasted = format_duration((end - notice.opened_at).total_seconds())
        how = f" ({notice.resolution})" if notice.resolution else ""
        line = f"✅ resolved{how} after {lasted}: {title}"
    elif message.headline is Headline.WORSE:
        line = f"⬆️ worse, now {notice.severity.value}: {title}"
    else:
        line = f"🔁 back: {flaps or title}"
    return [(Span(line, Style.BOLD),)]


# -- fitting a limit ------------------------------------------------------------


def fit(lines: list[Line], limit: int, measure: Callable[[str], int] = utf16_len) -> list[Line]:
    """``lines`` within ``limit`` characters (line breaks included): whole lines
    while they fit, then as much of the next as fits, then a note of the cut."""

    def width(line: Line) -> int:
        return sum(measure(span.text) for span in line)

    if sum(width(line) + 1 for line in lines) - 1 <= limit:
        return lines
    note_for = f"{ELLIPSIS} cut: {len(lines)} more lines"
    budget = limit - measure(note_for) - 1
    kept: list[Line] = []
    used = 0
    for line in lines:
        cost = width(line) + (1 if kept else 0)
        if used + cost <= budget:
            kept.append(line)
            used += cost
            continue
        room = budget - used - (1 if kept else 0) - measure(ELLIPSIS)
        partial = _cut(line, room, measure)
        if partial:
            kept.append((*partial, Span(ELLIPSIS)))
        break
    kept.append((Span(f"{ELLIPSIS} cut: {len(lines) - len(kept)} more lines"),))
    return kept


def _cut(line: Line, room: int, measure: Callable[[str], int]) -> list[Span]:
    spans: list[Span] = []
    for span in line:
        if room <= 0:
            break
        text = span.text
        while text and measure(text) > room:
            text = text[: max(len(text) - max(measure(text) - room, 1), 0)]
        if text:
            spans.append(Span(text, span.style, span.url))
            room -= measure(text)
    return spans


# -- formats --------------------------------------------------------------------


def telegram_html(lines: Iterable[Line]) -> str:
    """Telegram's HTML parse mode: ``<``, ``>`` and ``&`` escaped in every text."""

    def render(span: Span) -> str:
        text = html.escape(span.text, quote=False)
        if span.style is Style.BOLD:
            return f"<b>{text}</b>"
        if span.style is Style.CODE:
            return f"<code>{text}</code>"
        if span.style is Style.LINK:
            return f'<a href="{html.escape(span.url)}">{text}</a>'
        return text

    return "\n".join("".join(render(span) for span in line) for line in lines)


def slack_escape(text: str) -> str:
    """Slack's three control characters, so nothing becomes ``<!channel>`` or a link.

    >>> slack_escape("<!channel> & <https://x|y>")
    '&lt;!channel&gt; &amp; &lt;https://x|y&gt;'
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_mrkdwn(lines: Iterable[Line]) -> str:
    def render(span: Span) -> str:
        text = slack_escape(span.text)
        if span.style is Style.BOLD:
            return f"*{text}*"
        if span.style is Style.CODE:
            # mrkdwn has no escape for a backquote inside code
            return "`" + text.replace("`", "'") + "`"
        if span.style is Style.LINK:
            return f"<{span.url}|{text}>"
        return text

    return "\n".join("".join(render(span) for span in line) for line in lines)


def plain(lines: Iterable[Line]) -> str:
    return "\n".join("".join(span.text for span in line) for line in lines)


# -- Alertmanager's webhook payload ---------------------------------------------


def alert_labels(notice: Notice) -> dict[str, str]:
    """The labels the bundled Prometheus rules give the same incident's alert
    (those of lockwatch_incident_active), the unused ones left out."""
    labels = {"alertname": alert_name(notice.kind), "target": _value(notice.target)}
    labels.update((name, value) for name, value in notice.labels if value)
    return labels


def _fingerprint(labels: Mapping[str, str]) -> str:
    text = "\x00".join(f"{k}\x00{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _alert(message: Message, notice: Notice, generator_url: str) -> dict[str, Any]:
    labels = alert_labels(notice)
    resolved = message.headline is Headline.RESOLVED
    return {
        "status": "resolved" if resolved else "firing",
        "labels": labels,
        "annotations": {
            "summary": _value(notice.title, SUMMARY_LIMIT),
            "description": plain(_body(document(message))),
            "runbook_url": notice.runbook,
        },
        "startsAt": iso(notice.opened_at),
        "endsAt": iso(notice.resolved_at or message.created_at) if resolved else ZERO_TIME,
        "generatorURL": generator_url,
        "fingerprint": _fingerprint(labels),
    }


def _body(lines: list[Line]) -> list[Line]:
    """The lines after the heading (the title, what it is, how often it opened)."""
    return lines[lines.index(()) + 1 :]


def _test_alert(message: Message) -> dict[str, Any]:
    labels = {"alertname": "LockwatchNotifyTest", "severity": "info", "channel": message.channel}
    return {
        "status": "firing",
        "labels": labels,
        "annotations": {"summary": plain(document(message)[1:2])},
        "startsAt": iso(message.created_at),
        "endsAt": ZERO_TIME,
        "generatorURL": "",
        "fingerprint": _fingerprint(labels),
    }


def webhook_payload(message: Message, external_url: str) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4), so receivers written for it work.

    One alert per message, the incident's, labelled as the bundled rules label
    it; its target and incident id are ``groupLabels``, as the example
    Alertmanager config groups them.
    """
    generator = f"{external_url.rstrip('/')}/api/v1/incidents" if external_url else ""
    notice = message.notice
    alert = _test_alert(message) if notice is None else _alert(message, notice, generator)
    labels = alert["labels"]
    group = {k: labels[k] for k in ("target", "incident") if k in labels}
    return {
        "version": "4",
        "groupKey": f"{{}}:{{channel={message.channel!r}}}:{_fingerprint(group)}",
        "truncatedAlerts": 0,
        "status": alert["status"],
        "receiver": message.channel,
        "groupLabels": group,
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": external_url,
        "alerts": [alert],
    }
