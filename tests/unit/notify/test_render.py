"""Messages as Telegram HTML, Slack mrkdwn and Alertmanager webhook payloads:
complete, escaped and within each service's limits whatever the clients wrote."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import TypedDict, Unpack

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.findings import FindingKind, Severity
from lockwatch.model.incident_text import RUNBOOKS_PATH, alert_name
from lockwatch.notify.message import Headline, Message, Notice
from lockwatch.notify.render import (
    SLACK_LIMIT,
    TELEGRAM_LIMIT,
    Span,
    Style,
    document,
    fit,
    plain,
    slack_mrkdwn,
    telegram_html,
    utf16_len,
    webhook_payload,
)
from tests.fixtures.evidence import holder, lock_evidence
from tests.fixtures.incident_values import TERMINATE, incident, resolved, session_root
from tests.fixtures.notify import HOLDER_PID, convoy, finding
from tests.fixtures.snapshots import NOW, client_text, held_by
from tests.fixtures.standins import telegram_text

# What the convoy's findings are about: their holder.
HELD_BY = held_by(HOLDER_PID).render()

HOSTILE = [
    "<b>bold</b><script>alert(1)</script><a href='http://evil'>x</a>",
    "*bold* _italic_ [link](http://evil) `code` ||spoiler|| ~strike~ \\ > quote",
    "<!channel> <!here> <@U123> <#C123> <https://evil.example|click me> @channel",
    "first line\nsecond line\r\nthird\u2028fourth\x00\x1b[31m",
    "&amp; &lt; &#60; & < >",
    "x" * 10_000,
]


def message(
    notice: Notice, headline: Headline = Headline.OPENED, when_seconds: float = 0
) -> Message:
    return Message("m1", "ops", NOW + timedelta(seconds=when_seconds), notice, headline)


class ConvoyOptions(TypedDict, total=False):
    """What ``open_convoy`` passes on to ``convoy``."""

    target: str
    key: int
    app: str
    query: str
    addr: str | None
    waiters: int


def open_convoy(**kwargs: Unpack[ConvoyOptions]) -> Message:
    app = kwargs.get("app", "webhook-worker-1")
    root = session_root(app=app)
    return message(
        Notice.of(incident(convoy(**kwargs), root=root, title=f"pid 1234 {app} holds 42"))
    )


def test_an_incident_message_leads_with_its_title_then_root_impact_and_next_step() -> None:
    text = plain(document(open_convoy()))
    first, second, *_ = text.splitlines()
    assert first == "🔥 OPENED: pid 1234 webhook-worker-1 holds 42"
    assert second == "critical · main · incident inc-1"
    assert f"root: pid {HOLDER_PID} · webhook-worker-1 · 10.0.0.5" in text
    assert "now: held 5m40s · idle 5m30s · 5 waiting now" in text
    assert "last query: SELECT pg_advisory_lock(42)" in text
    assert "impact: at most 5 waiting · 25m of waiting" in text
    assert f"[firing] lock_convoy · critical · main · {HELD_BY}" in text
    assert f"[firing] lock_held_too_long · critical · main · {HELD_BY}" in text
    assert text.index("[firing] lock_convoy") < text.index("next step: ")
    assert "next step: end the holder's session" in text
    assert f"sql: {TERMINATE}" in text
    assert "cost: it has no open transaction: nothing is rolled back" in text
    assert "runbook: LockwatchLockConvoy" in text


def test_a_resolution_says_how_it_ended_and_how_long_it_lasted() -> None:
    opened = incident(opened_at=NOW)
    text = plain(document(message(Notice.of(resolved(opened, 80)), Headline.RESOLVED, 90)))
    assert text.startswith("✅ RESOLVED: ")
    assert "resolved (released) after 1m20s" in text


def test_worse_and_reminder_messages_say_so_and_which_findings_are_new() -> None:
    worse = plain(document(message(Notice.of(incident(), {"lock_convoy"}), Headline.WORSE)))
    assert worse.startswith("⬆️ WORSE: ")
    assert "[still firing] lock_convoy · " in worse
    assert "[firing] lock_held_too_long · " in worse
    reminder = Notice.of(incident(), {"lock_convoy", "lock_held_too_long"})
    assert plain(document(message(reminder, Headline.REMINDER))).startswith("🔁 STILL OPEN: ")


def test_a_resolution_tells_each_listed_finding_resolved() -> None:
    text = plain(document(message(Notice.of(resolved(incident())), Headline.RESOLVED, 90)))
    assert f"[resolved] lock_convoy · critical · main · {HELD_BY}" in text
    assert "[firing]" not in text
    assert "next step" not in text and "sql: " not in text, "nothing left to do"
    assert "at worst: held 5m40s · idle 5m30s" in text


def test_telegram_gets_bold_code_and_a_runbook_link_in_html() -> None:
    markup = telegram_html(document(open_convoy()))
    assert markup.startswith("<b>🔥 OPENED: pid 1234")
    assert f"<code>{html.escape(TERMINATE, quote=False)}</code>" in markup
    assert f'<a href="{RUNBOOKS_PATH}#lockwatchlockconvoy">LockwatchLockConvoy</a>' in markup
    assert telegram_text(markup)  # Telegram's parser accepts it


@pytest.mark.parametrize("value", HOSTILE, ids=["html", "markdown", "slack", "lines", "&", "10k"])
def test_hostile_application_names_and_queries_arrive_escaped_and_within_limits(
    value: str,
) -> None:
    hostile = open_convoy(app=value, query=value, addr=value[:40])
    lines = fit(document(hostile), TELEGRAM_LIMIT)

    shown = telegram_text(telegram_html(lines))  # raises on anything Telegram would refuse
    assert utf16_len(shown) <= TELEGRAM_LIMIT
    root = next(line for line in shown.splitlines() if line.startswith("root: "))
    assert len(root) < 300, "a 10,000-character value must be cut short"
    if value.startswith("<b>"):
        assert "<script>alert(1)</script>" in shown, "markup must show as text, not vanish"

    slack = slack_mrkdwn(fit(document(hostile), SLACK_LIMIT))
    # the only '<' left open Slack's links are lockwatch's own runbook links
    assert re.findall(r"<(?!/runbooks#)", slack) == []  # the one link: its runbook
    assert "<!channel>" not in slack and "<@U123>" not in slack
    assert len(slack) < 40_000

    assert "second line" not in "".join(
        line for line in shown.splitlines() if line.startswith("first line")
    ), "a newline from a client must not start a line of its own"


@settings(max_examples=60, deadline=None)
@given(app=client_text, query=client_text, summary=client_text)
def test_any_client_text_renders_as_valid_telegram_html_within_the_limit(
    app: str, query: str, summary: str
) -> None:
    findings = convoy(app=app, query=query)
    findings.append(
        finding(
            summary=summary or "x",
            evidence=lock_evidence(
                "7,13",
                holders=(
                    holder(
                        HOLDER_PID,
                        application_name=None,
                        client_addr=None,
                        state=None,
                        state_seconds=None,
                        held_seconds=0.0,
                        query=app,
                    ),
                ),
            ),
        )
    )
    notice = Notice.of(incident(findings, root=session_root(app=app), title=summary or "x"))
    lines = fit(document(message(notice)), TELEGRAM_LIMIT)
    assert utf16_len(telegram_text(telegram_html(lines))) <= TELEGRAM_LIMIT
    assert "\n" not in "".join(span.text for line in lines for span in line)


def test_an_incident_of_many_findings_fits_the_limit_listing_the_first_few() -> None:
    orphans = [finding(lock=str(n), summary="s" * 400) for n in range(100)]
    lines = fit(document(message(Notice.of(incident(orphans)))), TELEGRAM_LIMIT)
    shown = telegram_text(telegram_html(lines))
    assert utf16_len(shown) <= TELEGRAM_LIMIT
    assert "and 95 more finding(s)" in shown


@given(st.lists(st.lists(st.text(max_size=300), max_size=5), max_size=40), st.integers(40, 2000))
def test_fit_never_exceeds_its_limit(texts: list[list[str]], limit: int) -> None:
    lines = [tuple(Span(t.replace("\n", " "), Style.BOLD) for t in line) for line in texts]
    kept = fit(lines, limit)
    assert sum(utf16_len(s.text) for line in kept for s in line) + len(kept) - 1 <= limit


def test_the_webhook_payload_is_alertmanagers_version_4_with_one_alert_per_incident() -> None:
    payload = webhook_payload(open_convoy(), "http://127.0.0.1:10057/")
    assert payload["version"] == "4"
    assert payload["status"] == "firing"
    assert payload["receiver"] == "ops"
    assert payload["groupLabels"] == {"target": "main", "incident": "inc-1"}
    assert payload["externalURL"] == "http://127.0.0.1:10057/"
    (alert,) = payload["alerts"]
    fingerprint = session_root().fingerprint
    assert alert["labels"] == {
        "alertname": "LockwatchLockConvoy",
        "target": "main",
        "incident": "inc-1",
        "fingerprint": fingerprint,
        "root": "session",
        "kind": "lock_convoy",
        "severity": "critical",
        "database": "app",
        "lock": "42",
        "pid": "1234",
        "application": "webhook-worker-1",
        "holder": "pid 1234 · webhook-worker-1 · 10.0.0.5",
        "blocking_query": "SELECT pg_advisory_lock(?)",
    }
    assert payload["commonLabels"] == alert["labels"]
    assert alert["status"] == "firing"
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["startsAt"] == "2025-03-14T21:35:00Z"
    assert alert["generatorURL"] == "http://127.0.0.1:10057/api/v1/incidents"
    assert re.fullmatch(r"[0-9a-f]{16}", alert["fingerprint"])
    assert "webhook-worker-1" in alert["annotations"]["description"]
    assert TERMINATE in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"].endswith("#lockwatchlockconvoy")
    json.dumps(payload, allow_nan=False)


def test_a_resolved_webhook_alert_ends_when_the_incident_resolved() -> None:
    final = resolved(incident([finding(lasted=60)]), after=5)
    payload = webhook_payload(message(Notice.of(final), Headline.RESOLVED, 10), "http://lw/")
    (alert,) = payload["alerts"]
    assert (payload["status"], alert["status"]) == ("resolved", "resolved")
    assert alert["endsAt"] == "2025-03-14T21:40:05Z"


def test_undecodable_bytes_from_a_client_still_make_valid_json() -> None:
    payload = webhook_payload(open_convoy(app="worker\udcff"), "")
    json.dumps(payload, ensure_ascii=False).encode("utf-8")  # a lone surrogate fails here
    description = payload["alerts"][0]["annotations"]["description"]
    assert "root: pid 1234 · worker" in description


def test_the_test_message_says_which_channel_it_came_through() -> None:
    test = Message("t", "ops-telegram", NOW)
    assert "Channel ops-telegram works" in telegram_text(telegram_html(document(test)))
    (alert,) = webhook_payload(test, "")["alerts"]
    assert alert["labels"] == {
        "alertname": "LockwatchNotifyTest",
        "severity": "info",
        "channel": "ops-telegram",
    }


def test_every_finding_kind_has_an_alert_name_in_the_rules_style() -> None:
    names = {alert_name(kind.value) for kind in FindingKind}
    assert len(names) == len(FindingKind)
    assert all(re.fullmatch(r"Lockwatch[A-Z][A-Za-z]+", name) for name in names)
    assert Severity.CRITICAL.value == "critical"
