"""A living channel's worker against the Slack Web API stand-in, on a clock
the test moves: a 429's ``Retry-After`` holds every later edit of that chat,
edits queued behind it collapse into one, only what rang a phone goes on
the incident's timeline, and a restart edits the message posted before it."""

from __future__ import annotations

from pathlib import Path

from lockwatch.notify.service import AlertNotifier
from lockwatch.settings.notify import NotifySettings, SlackApiChannel, TelegramChannel
from lockwatch.state.deliveries import Deliveries
from tests.fixtures.snapshots import TARGET
from tests.fixtures.standins import ChatStandin, Reply
from tests.integration.test_alerting_notifier import FAST, Clock, poll
from tests.unit.notify.test_living import grown


def test_a_rate_limited_edit_waits_its_retry_after_and_later_edits_collapse_into_one(
    standin: ChatStandin,
) -> None:
    clock = Clock()
    channel = SlackApiChannel("team", standin.slack_token, standin.slack_channel, standin.slack_api)
    settings = NotifySettings(
        channels=(channel,), edit_interval=1, connect_timeout=1.0, read_timeout=1.0
    )
    deliveries = Deliveries()
    alerts = AlertNotifier(
        settings, None, targets=[TARGET], clock=clock, backoff=FAST, deliveries=deliveries
    )
    (worker,) = alerts.workers
    poll(alerts, [grown(5)])
    (ts,) = standin.kept("slack_api")

    standin.reply(Reply(429, b"", {"Retry-After": "20"}), service="slack_api")
    clock.advance(2)
    poll(alerts, [grown(6)])  # refused: come back in 20 s
    clock.advance(2)
    poll(alerts, [grown(7)])  # replaces the edit still waiting, and waits as long
    assert worker.pending == 1
    clock.advance(15)
    worker.step()
    assert [r.status for r in standin.requests("slack_api")] == [200, 429]
    clock.advance(4)  # 20 s after the refusal
    worker.step()
    assert [r.status for r in standin.requests("slack_api")] == [200, 429, 200]
    kept = standin.kept("slack_api")[ts]
    assert (kept.edits, kept.replies) == (1, [])
    assert "7 waiting" in kept.text
    # The post rang a phone; the edit did not: one delivery on the timeline.
    assert len(deliveries.of(grown(7).id)) == 1


def test_a_restart_edits_the_message_it_posted_before(standin: ChatStandin, tmp_path: Path) -> None:
    clock = Clock()
    channel = TelegramChannel(
        "ops", standin.token, standin.chat_id, standin.telegram_api, living=True
    )
    settings = NotifySettings(channels=(channel,), edit_interval=1, read_timeout=1.0)
    before = AlertNotifier(settings, tmp_path, targets=[TARGET], clock=clock, backoff=FAST)
    poll(before, [grown(5)])
    (posted,) = standin.kept("telegram")

    after = AlertNotifier(settings, tmp_path, targets=[TARGET], clock=clock, backoff=FAST)
    clock.advance(2)
    poll(after, [grown(6)])
    assert list(standin.kept("telegram")) == [posted]
    assert "6 waiting" in standin.kept("telegram")[posted].text
