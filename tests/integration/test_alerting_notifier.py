"""lockwatch's own notifier over real HTTP to local stand-ins of Telegram, Slack
and a webhook receiver: one message per incident as it opens, reminds and
resolves; errors, rate limits, bad tokens and a receiver that never answers; a
restart with pending messages; each delivery in the notifier's own record."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockwatch.cli import main
from lockwatch.model.incidents import Incident, IncidentChanges
from lockwatch.notify.inbox import Backoff
from lockwatch.notify.service import AlertNotifier, ChannelWorker
from lockwatch.settings.notify import NotifySettings, SlackChannel, TelegramChannel, WebhookChannel
from lockwatch.state.deliveries import Deliveries
from tests.fixtures.incident_values import incident, session_root
from tests.fixtures.notify import HOLDER_PID, convoy, finding
from tests.fixtures.postgres import free_port
from tests.fixtures.snapshots import NOW, TARGET
from tests.fixtures.standins import ChatStandin, Reply, telegram_flood

FAST = Backoff(first=0.01, cap=0.05)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def channels(standin: ChatStandin, token: str | None = None) -> NotifySettings:
    return NotifySettings(
        channels=(
            TelegramChannel("ops", token or standin.token, standin.chat_id, standin.telegram_api),
            SlackChannel("team", standin.slack_url),
            WebhookChannel("receiver", standin.webhook_url),
        ),
        repeat_interval=3600,
        connect_timeout=1.0,
        read_timeout=0.5,
    )


def notifier(
    settings: NotifySettings,
    clock: Clock,
    state_dir: Path | None = None,
    deliveries: Deliveries | None = None,
) -> AlertNotifier:
    return AlertNotifier(
        settings,
        state_dir,
        targets=[TARGET],
        external_url="http://lw/",
        clock=clock,
        backoff=FAST,
        deliveries=deliveries,
    )


def alone(lock: str = "7,13") -> Incident:
    """An incident of one orphaned lock: one root, one finding."""
    root = replace(session_root(), lock=lock)  # the lock names the root: one incident each
    return incident([finding(lock=lock)], id=f"orphan-{lock}", root=root)


def poll(alerts: AlertNotifier, active: list[Incident]) -> None:
    """One poll's open incidents handed over, then a step of each worker."""
    changes = IncidentChanges(TARGET, active=tuple(active))
    alerts(changes)
    for worker in alerts.workers:
        worker.step()


def retry_soon(worker: ChannelWorker, clock: Clock) -> None:
    """Let the worker's next attempt fall due and run it."""
    clock.advance(FAST.cap)
    worker.step()


def test_a_convoy_incident_opens_reminds_and_resolves_through_every_channel(
    standin: ChatStandin,
) -> None:
    clock = Clock()
    deliveries = Deliveries()
    alerts = notifier(channels(standin), clock, deliveries=deliveries)

    poll(alerts, [incident()])
    telegram, slack, hook = (standin.delivered(s) for s in ("telegram", "slack", "webhook"))
    assert (len(telegram), len(slack), len(hook)) == (1, 1, 1)
    for message in (telegram[0], slack[0]):
        assert "🔥 OPENED: pid 1234 webhook-worker-1" in message.text.splitlines()[0]
        assert f"pid {HOLDER_PID} · webhook-worker-1 · 10.0.0.5" in message.text
        assert "next step: end the holder's session" in message.text
    assert telegram[0].body["parse_mode"] == "HTML"
    payload = hook[0].body
    assert payload["version"] == "4" and payload["status"] == "firing"
    assert [a["labels"]["alertname"] for a in payload["alerts"]] == ["LockwatchLockConvoy"]
    noted = sorted((d.target, d.incident, d.channel) for d in deliveries.of("inc-1"))
    assert noted == [(TARGET, "inc-1", c) for c in ("ops", "receiver", "team")]

    clock.advance(600)
    poll(alerts, [incident(convoy(clock.now))])
    assert len(standin.delivered()) == 3, "nothing new before the repeat interval"

    clock.advance(3000)
    poll(alerts, [incident(convoy(clock.now))])
    reminders = standin.delivered()[3:]
    assert len(reminders) == 3
    assert reminders[0].text.startswith("🔁 STILL OPEN: pid 1234")

    clock.advance(30)
    poll(alerts, [])
    resolved = standin.delivered()[6:]
    assert [r.service for r in resolved] == ["telegram", "slack", "webhook"]
    assert resolved[0].text.startswith("✅ RESOLVED: pid 1234 webhook-worker-1")
    assert resolved[2].body["status"] == "resolved"
    poll(alerts, [])
    assert len(standin.delivered()) == 9
    assert [w.sent_total for w in alerts.workers] == [3, 3, 3]


def test_server_errors_are_retried_with_backoff_until_the_message_goes_through(
    standin: ChatStandin,
) -> None:
    clock = Clock()
    alerts = notifier(channels(standin), clock)
    (worker, *_) = alerts.workers
    standin.reply(Reply(500, {"ok": False}), Reply(502, b"bad gateway"), service="telegram")

    poll(alerts, [alone()])
    assert len(standin.requests("telegram")) == 1 and worker.pending == 1
    worker.step()  # the backoff has not passed: no new attempt
    assert len(standin.requests("telegram")) == 1
    retry_soon(worker, clock)
    retry_soon(worker, clock)

    assert [r.status for r in standin.requests("telegram")] == [500, 502, 200]
    assert len(standin.delivered("telegram")) == 1
    assert (worker.errors_total, worker.sent_total, worker.pending) == (2, 1, 0)


def test_a_telegram_429_is_retried_after_its_retry_after_and_not_before(
    standin: ChatStandin,
) -> None:
    clock = Clock()
    alerts = notifier(channels(standin), clock)
    (worker, *_) = alerts.workers
    standin.reply(telegram_flood(retry_after=30), service="telegram")

    poll(alerts, [alone()])
    clock.advance(29)
    worker.step()
    assert len(standin.requests("telegram")) == 1
    clock.advance(1)
    worker.step()
    assert [r.status for r in standin.requests("telegram")] == [429, 200]


def test_a_slack_429_honours_the_retry_after_header(standin: ChatStandin) -> None:
    clock = Clock()
    alerts = notifier(channels(standin), clock)
    slack = alerts.workers[1]
    standin.reply(Reply(429, b"", {"Retry-After": "12"}), service="slack")

    poll(alerts, [alone()])
    clock.advance(11)
    slack.step()
    assert [r.status for r in standin.requests("slack")] == [429]
    clock.advance(1)
    slack.step()
    assert [r.status for r in standin.requests("slack")] == [429, 200]


def test_a_bad_token_is_reported_once_and_never_retried(
    standin: ChatStandin, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    wrong = "999:not-the-token"
    alerts = notifier(channels(standin, token=wrong), clock)
    (worker, *_) = alerts.workers

    with caplog.at_level(logging.WARNING, logger="lockwatch.notify"):
        poll(alerts, [alone()])
        for _ in range(3):
            retry_soon(worker, clock)
        poll(alerts, [alone(), alone("99")])
        for _ in range(3):
            retry_soon(worker, clock)

    assert [r.status for r in standin.requests("telegram")] == [401, 401]
    assert (worker.failed_total, worker.pending) == (2, 0)
    refusals = [r.getMessage() for r in caplog.records if "not retried" in r.getMessage()]
    assert refusals == [
        "notify ops: message dropped, not retried: Telegram answered HTTP 401: "
        "Unauthorized; check bot_token"
    ]
    assert wrong not in caplog.text and standin.token not in caplog.text


def test_an_unknown_chat_is_refused_for_good_with_a_hint(
    standin: ChatStandin, caplog: pytest.LogCaptureFixture
) -> None:
    chat = TelegramChannel("ops", standin.token, "-42", standin.telegram_api)
    alerts = notifier(NotifySettings(channels=(chat,)), Clock())
    poll(alerts, [alone()])
    assert alerts.workers[0].failed_total == 1
    assert [r.status for r in standin.requests("telegram")] == [400]
    assert "Bad Request: chat not found; check chat_id" in caplog.text


def test_a_receiver_that_never_answers_costs_one_read_timeout_per_attempt_and_gets_the_message_once(
    standin: ChatStandin,
) -> None:
    clock = Clock()
    alerts = notifier(channels(standin), clock)
    (worker, *_) = alerts.workers
    standin.hang()

    started = time.monotonic()
    poll(alerts, [alone()])
    took = time.monotonic() - started
    assert worker.pending == 1 and worker.errors_total == 1
    assert took < 10, f"one attempt took {took:.1f}s with a 0.5s read timeout"
    retry_soon(worker, clock)
    assert worker.errors_total == 2

    standin.recover()
    retry_soon(worker, clock)
    retry_soon(worker, clock)
    assert len(standin.delivered("telegram")) == 1
    assert [r.status for r in standin.requests("telegram")] == [None, None, 200]


def test_delivery_errors_never_show_the_token_or_the_webhook_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    token = "4242:secret-token-value"
    hook = f"{closed}/services/T0/B0/secret-hook-path"
    settings = NotifySettings(
        channels=(TelegramChannel("ops", token, "-1", closed), SlackChannel("team", hook))
    )
    clock = Clock()
    alerts = notifier(settings, clock)
    with caplog.at_level(logging.WARNING, logger="lockwatch.notify"):
        poll(alerts, [alone()])
    assert "cannot reach http://127.0.0.1:" in caplog.text
    assert "secret" not in caplog.text


def test_a_restart_delivers_a_pending_message_once_and_does_not_announce_again(
    standin: ChatStandin, tmp_path: Path
) -> None:
    clock = Clock()
    settings = NotifySettings(
        channels=(TelegramChannel("ops", standin.token, standin.chat_id, standin.telegram_api),)
    )
    standin.reply(Reply(500, b"down"))
    first = notifier(settings, clock, tmp_path)
    poll(first, [incident()])
    assert first.workers[0].pending == 1 and standin.delivered() == []

    restarted = notifier(settings, clock, tmp_path)
    assert restarted.workers[0].pending == 1
    retry_soon(restarted.workers[0], clock)
    assert len(standin.delivered("telegram")) == 1

    again = notifier(settings, clock, tmp_path)
    clock.advance(60)
    poll(again, [incident(convoy(clock.now))])
    assert len(standin.delivered("telegram")) == 1, "an open incident was announced twice"
    poll(again, [])
    assert standin.delivered("telegram")[-1].text.startswith("✅ RESOLVED")


def test_notify_test_reports_what_each_channel_answered(
    standin: ChatStandin, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(standin.token)
    (tmp_path / "bad-token").write_text("1:wrong")
    (tmp_path / "slack").write_text(standin.slack_url)
    config = tmp_path / "lockwatch.yml"
    config.write_text(
        f"""
targets: [{{name: main, dsn: "host=127.0.0.1"}}]
notify:
  channels:
    - {{name: ops, type: telegram, bot_token_file: token, chat_id: "{standin.chat_id}",
       api_url: "{standin.telegram_api}"}}
    - {{name: team, type: slack, webhook_url_file: slack}}
    - {{name: broken, type: telegram, bot_token_file: bad-token, chat_id: "1",
       api_url: "{standin.telegram_api}"}}
"""
    )
    runner = CliRunner()
    everything = runner.invoke(main, ["notify-test", "-c", str(config)])
    assert everything.exit_code == 1, everything.output
    assert everything.output.splitlines() == [
        "ops (telegram): ok, HTTP 200, message 1",
        "team (slack): ok, HTTP 200 ok",
        "broken (telegram): FAILED, Telegram answered HTTP 401: Unauthorized; check bot_token "
        "(sending again will not help)",
    ]
    assert "Channel ops works" in standin.delivered("telegram")[0].text

    only = runner.invoke(main, ["notify-test", "-c", str(config), "--channel", "team"])
    assert (only.exit_code, only.output) == (0, "team (slack): ok, HTTP 200 ok\n")
    unknown = runner.invoke(main, ["notify-test", "-c", str(config), "--channel", "pager"])
    assert unknown.exit_code == 2 and "no channel named pager" in unknown.output


def test_incidents_of_a_target_removed_while_stopped_are_told_unwatched_once(
    standin: ChatStandin, tmp_path: Path
) -> None:
    clock = Clock()
    poll(notifier(channels(standin), clock, tmp_path), [alone()])
    assert len(standin.delivered("telegram")) == 1

    restarted = AlertNotifier(
        channels(standin), tmp_path, targets=["other"], clock=clock, backoff=FAST
    )
    for _ in range(3):
        for worker in restarted.workers:
            worker.step()
    (_fired, ended) = standin.delivered("telegram")
    # Nobody saw it end: no longer watched, as a target removed by a reload.
    assert ended.text.startswith("👁 NO LONGER WATCHED:"), ended.text
    assert not any(w.state.announced for w in restarted.workers)


def test_telegram_answering_200_without_its_json_is_retried_not_dropped(
    standin: ChatStandin,
) -> None:
    clock = Clock()
    alerts = notifier(channels(standin), clock)
    (worker, *_) = alerts.workers
    standin.reply(Reply(200, b"<html>captive portal</html>"), service="telegram")
    poll(alerts, [alone()])
    assert worker.pending == 1 and worker.failed_total == 0
    retry_soon(worker, clock)
    assert len(standin.delivered("telegram")) == 2 and worker.pending == 0


def test_an_answer_that_times_out_after_the_request_is_sent_whole_is_sent_again_a_few_times(
    standin: ChatStandin, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    settings = replace(channels(standin), unanswered_retries=1)
    alerts = notifier(settings, clock)
    (worker, *_) = alerts.workers
    standin.slow(1.0)  # read_timeout 0.5 s
    with caplog.at_level(logging.WARNING, logger="lockwatch.notify"):
        poll(alerts, [alone()])
        retry_soon(worker, clock)
        retry_soon(worker, clock)
    assert len(standin.delivered("telegram")) == 2
    assert worker.pending == 0 and worker.failed_total == 1
    said = [r.getMessage() for r in caplog.records if "notify ops" in r.getMessage()]
    assert len(said) == 2 and all("may have been delivered" in line for line in said), said
