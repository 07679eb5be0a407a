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

from lockwatch.model.evidence import Evidence, LockEvidence
from lockwatch.model.findings import Finding, subject_label
from lockwatch.notify.message import Entry, EntryState, Message, alert_name, runbook_url
from lockwatch.text import ELLIPSIS, format_duration, iso_utc, one_line, printable

TELEGRAM_LIMIT = 4096  # characters after entity parsing, counted in UTF-16 units
# Slack cuts text past 40,000 characters; 3,000 visible ones stay readable and,
# even if every one of them is escaped (&amp; is five), far from that limit.
SLACK_LIMIT = 3000
SUMMARY_LIMIT = 500
VALUE_LIMIT = 80
QUERY_LIMIT = 200
SHOWN_HOLDERS = 3
SHOWN_WAITERS = 5
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing

_HEADLINES = {
    EntryState.NEW: "🔥 FIRING",
    EntryState.RESOLVED: "✅ RESOLVED",
    EntryState.FIRING: "🔁 STILL FIRING",
}
_ENTRY_WORDS = {
    EntryState.NEW: "firing",
    EntryState.RESOLVED: "resolved",
    EntryState.FIRING: "still firing",
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


def _where(finding: Finding) -> str:
    return f"{_value(finding.target)} · {_value(finding.subject.render())}"


# -- the document ---------------------------------------------------------------


def document(message: Message) -> list[Line]:
    """The message as lines of spans: a headline, then one block per finding."""
    if message.test:
        return [
            (Span("🔔 lockwatch test message", Style.BOLD),),
            (Span(f"Channel {_value(message.channel)} works: lockwatch can reach this chat."),),
            (Span(f"Sent {iso(message.created_at)}"),),
        ]
    state = message.headline
    lead = next(e.finding for e in message.entries if e.state is state)
    others = len(message.entries) - 1
    title = f"{_HEADLINES[state]}: {lead.kind.value} ({lead.severity.value}) on {_where(lead)}"
    if others:
        title += f" and {others} related"
    lines: list[Line] = [(Span(title, Style.BOLD),)]
    for entry in message.entries:
        lines.append(())
        lines.extend(entry_lines(entry, message.created_at))
    return lines


def entry_lines(entry: Entry, now: datetime) -> list[Line]:
    finding = entry.finding
    lines: list[Line] = [
        (
            Span(f"[{_ENTRY_WORDS[entry.state]}] "),
            Span(finding.kind.value, Style.BOLD),
            Span(f" · {finding.severity.value} · {_where(finding)}"),
        ),
        (Span(_value(finding.summary, SUMMARY_LIMIT)),),
    ]
    lines.extend(_holder_lines(finding.evidence))
    lines.extend(_waiter_lines(finding.evidence))
    lasted = format_duration((now - finding.since).total_seconds())
    if entry.state is EntryState.RESOLVED:
        lines.append((Span(f"resolved after {lasted} (since {iso(finding.since)})"),))
    else:
        lines.append((Span(f"since {iso(finding.since)} ({lasted})"),))
    alert = alert_name(finding.kind.value)
    lines.append((Span("runbook: "), Span(alert, Style.LINK, runbook_url(alert))))
    return lines


def _holder_lines(evidence: Evidence) -> list[Line]:
    holders = evidence.named_holders
    lines: list[Line] = []
    for holder in holders[:SHOWN_HOLDERS]:
        facts = [f"pid {holder.pid}", _value(holder.application_name or "-")]
        facts.append(_value(holder.client_addr or "local socket"))
        if holder.state:
            seconds = holder.state_seconds
            took = f" for {format_duration(seconds)}" if seconds is not None else ""
            facts.append(f"{_value(holder.state)}{took}")
        if holder.held_seconds is not None and holder.held_seconds > 0:
            facts.append(f"held {format_duration(holder.held_seconds)}")
        lines.append((Span("holder: "), Span(" · ".join(facts))))
        if holder.query:
            lines.append(
                (Span("  last query: "), Span(_value(holder.query, QUERY_LIMIT), Style.CODE))
            )
    if len(holders) > SHOWN_HOLDERS:
        lines.append((Span(f"  and {len(holders) - SHOWN_HOLDERS} more holders"),))
    return lines


def _waiter_lines(evidence: Evidence) -> list[Line]:
    if not isinstance(evidence, LockEvidence) or not evidence.waiters:
        return []
    waiters = evidence.waiters
    shown = ", ".join(
        f"pid {w.pid} ({_value(w.application_name or '-')})" for w in waiters[:SHOWN_WAITERS]
    )
    more = f" and {len(waiters) - SHOWN_WAITERS} more" if len(waiters) > SHOWN_WAITERS else ""
    longest = evidence.longest_wait_seconds
    took = f", longest {format_duration(longest)}" if longest is not None else ""
    return [(Span(f"waiting: {len(waiters)}{took}: {shown}{more}"),)]


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


def alert_labels(finding: Finding) -> dict[str, str]:
    """The labels the bundled Prometheus rules give the same finding's alert."""
    labels = {
        "alertname": alert_name(finding.kind.value),
        "kind": finding.kind.value,
        "severity": finding.severity.value,
        "target": _value(finding.target),
    }
    for name, value in finding.subject.as_dict().items():
        if value:
            labels[subject_label(name)] = _value(value)
    return labels


def _fingerprint(labels: Mapping[str, str]) -> str:
    text = "\x00".join(f"{k}\x00{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _alert(entry: Entry, message: Message, generator_url: str) -> dict[str, Any]:
    finding = entry.finding
    labels = alert_labels(finding)
    alert = labels["alertname"]
    resolved = entry.state is EntryState.RESOLVED
    return {
        "status": "resolved" if resolved else "firing",
        "labels": labels,
        "annotations": {
            "summary": _value(finding.summary, SUMMARY_LIMIT),
            "description": plain(entry_lines(entry, message.created_at)),
            "runbook_url": runbook_url(alert),
        },
        "startsAt": iso(finding.since),
        "endsAt": iso(message.created_at) if resolved else ZERO_TIME,
        "generatorURL": generator_url,
        "fingerprint": _fingerprint(labels),
    }


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


def _common(items: list[Mapping[str, str]]) -> dict[str, str]:
    if not items:
        return {}
    first = items[0]
    return {k: v for k, v in first.items() if all(item.get(k) == v for item in items[1:])}


def webhook_payload(message: Message, external_url: str) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4), so receivers written for it work.

    One alert per finding of the message, labelled as the bundled rules label
    it; the message's group becomes ``groupLabels``.
    """
    generator = f"{external_url.rstrip('/')}/api/v1/findings" if external_url else ""
    if message.test:
        alerts = [_test_alert(message)]
    else:
        alerts = [_alert(entry, message, generator) for entry in message.entries]
    labels = [alert["labels"] for alert in alerts]
    lead = labels[0]
    group = {k: lead[k] for k in ("target", *sorted(set(lead) - _NOT_SUBJECT)) if k in lead}
    return {
        "version": "4",
        "groupKey": f"{{}}:{{channel={message.channel!r}}}:{_fingerprint(group)}",
        "truncatedAlerts": 0,
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "receiver": message.channel,
        "groupLabels": group,
        "commonLabels": _common(labels),
        "commonAnnotations": _common([alert["annotations"] for alert in alerts]),
        "externalURL": external_url,
        "alerts": alerts,
    }


_NOT_SUBJECT = frozenset({"alertname", "kind", "severity", "target", "channel"})
