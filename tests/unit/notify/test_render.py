"""Messages as Telegram HTML, Slack mrkdwn and Alertmanager webhook payloads:
complete, escaped and within each service's limits whatever the clients wrote."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import TypedDict, Unpack

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.findings import FindingKind, Severity
from lockwatch.notify.message import Entry, EntryState, Message, alert_name
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
from tests.fixtures.notify import HOLDER_PID, convoy, finding
from tests.fixtures.snapshots import NOW, client_text
from tests.fixtures.standins import telegram_text

HOSTILE = [
    "<b>bold</b><script>alert(1)</script><a href='http://evil'>x</a>",
    "*bold* _italic_ [link](http://evil) `code` ||spoiler|| ~strike~ \\ > quote",
    "<!channel> <!here> <@U123> <#C123> <https://evil.example|click me> @channel",
    "first line\nsecond line\r\nthird\u2028fourth\x00\x1b[31m",
    "&amp; &lt; &#60; & < >",
    "x" * 10_000,
]


def message(*entries: Entry, when_seconds: float = 0) -> Message:
    return Message("m1", "ops", NOW + timedelta(seconds=when_seconds), entries)


class ConvoyOptions(TypedDict, total=False):
    """What ``firing_convoy`` passes on to ``convoy``."""

    target: str
    key: int
    app: str
    query: str
    addr: str | None
    waiters: int


def firing_convoy(**kwargs: Unpack[ConvoyOptions]) -> Message:
    return message(*(Entry(EntryState.NEW, f) for f in convoy(**kwargs)))


def test_a_convoy_message_names_the_lock_the_holder_its_query_and_the_waiters() -> None:
    text = plain(document(firing_convoy()))
    first = text.splitlines()[0]
    assert first == "🔥 FIRING: lock_convoy (critical) on main · app/42 and 1 related"
    assert f"holder: pid {HOLDER_PID} · webhook-worker-1 · 10.0.0.5 · idle for 5m30s" in text
    assert "last query: SELECT pg_advisory_lock(42)" in text
    assert "waiting: 5, longest 5m: pid 1235 (webhook-worker-2)" in text
    assert "[firing] lock_held_too_long · critical · main · app/42" in text
    assert "runbook: LockwatchLockConvoy" in text


def test_a_resolution_says_how_long_the_problem_lasted() -> None:
    (held, *_) = [f for f in convoy() if f.kind is FindingKind.LOCK_HELD_TOO_LONG]
    text = plain(document(message(Entry(EntryState.RESOLVED, held), when_seconds=80)))
    assert text.startswith("✅ RESOLVED: lock_held_too_long (critical) on main · app/42")
    assert "resolved after 2m" in text


def test_telegram_gets_bold_code_and_a_runbook_link_in_html() -> None:
    markup = telegram_html(document(firing_convoy()))
    assert markup.startswith("<b>🔥 FIRING: lock_convoy")
    assert "<code>SELECT pg_advisory_lock(42)</code>" in markup
    assert '<a href="https://github.com/lockwatch/lockwatch/blob/main/docs/runbooks.md#' in markup
    assert telegram_text(markup)  # Telegram's parser accepts it


@pytest.mark.parametrize("value", HOSTILE, ids=["html", "markdown", "slack", "lines", "&", "10k"])
def test_hostile_application_names_and_queries_arrive_escaped_and_within_limits(
    value: str,
) -> None:
    hostile = firing_convoy(app=value, query=value, addr=value[:40])
    lines = fit(document(hostile), TELEGRAM_LIMIT)

    shown = telegram_text(telegram_html(lines))  # raises on anything Telegram would refuse
    assert utf16_len(shown) <= TELEGRAM_LIMIT
    holder = next(line for line in shown.splitlines() if line.startswith("holder: "))
    assert len(holder) < 300, "a 10,000-character value must be cut short"
    if value.startswith("<b>"):
        assert "<script>alert(1)</script>" in shown, "markup must show as text, not vanish"

    slack = slack_mrkdwn(fit(document(hostile), SLACK_LIMIT))
    # the only '<' left open Slack's links are lockwatch's own runbook links
    assert re.findall(r"<(?!https://github\.com/lockwatch/)", slack) == []
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
                        1,
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
    lines = fit(document(message(*(Entry(EntryState.NEW, f) for f in findings))), TELEGRAM_LIMIT)
    assert utf16_len(telegram_text(telegram_html(lines))) <= TELEGRAM_LIMIT
    assert "\n" not in "".join(span.text for line in lines for span in line)


def test_a_huge_group_is_cut_at_the_limit_and_says_so() -> None:
    orphans = [finding(lock=str(n), summary="s" * 400) for n in range(100)]
    lines = fit(document(message(*(Entry(EntryState.NEW, f) for f in orphans))), TELEGRAM_LIMIT)
    shown = telegram_text(telegram_html(lines))
    assert utf16_len(shown) <= TELEGRAM_LIMIT
    assert re.search(r"… cut: \d+ more lines$", shown)


@given(st.lists(st.lists(st.text(max_size=300), max_size=5), max_size=40), st.integers(40, 2000))
def test_fit_never_exceeds_its_limit(texts: list[list[str]], limit: int) -> None:
    lines = [tuple(Span(t.replace("\n", " "), Style.BOLD) for t in line) for line in texts]
    kept = fit(lines, limit)
    assert sum(utf16_len(s.text) for line in kept for s in line) + len(kept) - 1 <= limit


def test_the_webhook_payload_is_alertmanagers_version_4() -> None:
    payload = webhook_payload(firing_convoy(), "http://127.0.0.1:10057/")
    assert payload["version"] == "4"
    assert payload["status"] == "firing"
    assert payload["receiver"] == "ops"
    assert payload["groupLabels"] == {"target": "main", "database": "app", "lock": "42"}
    assert payload["commonLabels"] == {
        "severity": "critical",
        "target": "main",
        "database": "app",
        "lock": "42",
    }
    assert payload["externalURL"] == "http://127.0.0.1:10057/"
    convoy_alert, held_alert = payload["alerts"]
    assert convoy_alert["labels"] == {
        "alertname": "LockwatchLockConvoy",
        "kind": "lock_convoy",
        "severity": "critical",
        "target": "main",
        "database": "app",
        "lock": "42",
    }
    assert held_alert["labels"]["alertname"] == "LockwatchLockHeldTooLong"
    assert convoy_alert["status"] == "firing"
    assert convoy_alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert convoy_alert["startsAt"] == "2025-03-14T21:35:00Z"
    assert convoy_alert["generatorURL"] == "http://127.0.0.1:10057/api/v1/findings"
    assert re.fullmatch(r"[0-9a-f]{16}", convoy_alert["fingerprint"])
    assert "webhook-worker-1" in convoy_alert["annotations"]["description"]
    assert convoy_alert["annotations"]["runbook_url"].endswith("#lockwatchlockconvoy")
    json.dumps(payload, allow_nan=False)


def test_a_resolved_webhook_alert_ends_when_the_message_was_made() -> None:
    orphan = finding(lasted=60)
    payload = webhook_payload(
        message(Entry(EntryState.RESOLVED, orphan), when_seconds=5), "http://lw/"
    )
    (alert,) = payload["alerts"]
    assert (payload["status"], alert["status"]) == ("resolved", "resolved")
    assert alert["endsAt"] == "2025-03-14T21:40:05Z"


def test_undecodable_bytes_from_a_client_still_make_valid_json() -> None:
    payload = webhook_payload(firing_convoy(app="worker\udcff"), "")
    json.dumps(payload, ensure_ascii=False).encode("utf-8")  # a lone surrogate fails here
    description = payload["alerts"][0]["annotations"]["description"]
    assert "holder: pid 1234 · worker · 10.0.0.5" in description


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
