"""The notifier inside a real ``lockwatch run`` during a real convoy (seed 002):
a receiver that never answers holds up no poll, a delivery goes on the
incident's timeline, and restarts neither lose a pending notification nor
announce an open incident twice (its id outlives them)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lockwatch.demo.scenarios import ConvoyIncident
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, add_telegram

pytestmark = [
    pytest.mark.pg,
    pytest.mark.slow,
    # Delivery does not depend on the server version: one is enough.
    pytest.mark.parametrize("pg_server", ["pg18"], indirect=True),
]

LOCKS = "{max_hold: 1h, orphan_after: 1h, convoy_waiters: 2, convoy_wait: 1s}"


@pytest.fixture
def incident(pg: PgDatabase) -> Iterator[ConvoyIncident]:
    convoy = ConvoyIncident(pg.admin_dsn, waiters=3)
    yield convoy
    convoy.stop()


@pytest.fixture
def lockwatch(tmp_path: Path, pg: PgDatabase, standin: ChatStandin) -> Iterator[LockwatchProcess]:
    port = free_port()
    config = write_config(tmp_path, port, {"main": pg.monitor_dsn}, locks=LOCKS)
    add_telegram(config, standin)
    process = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    yield process
    if process.proc is not None:
        assert process.stop() in (0, -signal.SIGKILL), process.log(whole=True)
        assert standin.token not in process.log(whole=True)


def pending(lockwatch: LockwatchProcess) -> float | None:
    return lockwatch.metric("lockwatch_notifications_pending", channel="ops")


def convoy_to_a_receiver_that_hangs(
    lockwatch: LockwatchProcess, incident: ConvoyIncident, standin: ChatStandin
) -> None:
    standin.hang()
    lockwatch.start()
    incident.start()
    # An attempt starts only once the message is saved in the outbox.
    wait_until(lambda: standin.requests("telegram"), message="a first delivery attempt")


def end_convoy_and_expect_one_resolution(incident: ConvoyIncident, standin: ChatStandin) -> None:
    incident.stop()
    wait_until(lambda: len(standin.delivered("telegram")) == 2, message="the resolution")
    opened, resolution = standin.delivered("telegram")
    assert resolution.text.startswith("✅ RESOLVED: ")
    assert _incident_line(opened.text) == _incident_line(resolution.text)


def _incident_line(text: str) -> str:
    """The line naming the incident a message is about: ``critical · main · incident <id>``."""
    return next(line for line in text.splitlines() if " · incident " in line)


def test_a_receiver_that_never_answers_holds_up_no_poll_and_gets_the_message_once_it_recovers(
    lockwatch: LockwatchProcess, incident: ConvoyIncident, standin: ChatStandin
) -> None:
    convoy_to_a_receiver_that_hangs(lockwatch, incident, standin)
    polls = lockwatch.metric("lockwatch_polls_total", target="main") or 0
    # Two more attempts, each hanging for its whole 1 s read timeout: main,
    # polled every 500 ms, must keep its pace meanwhile.
    wait_until(lambda: len(standin.requests("telegram")) >= 3, message="two more hung attempts")
    polled = (lockwatch.metric("lockwatch_polls_total", target="main") or 0) - polls
    assert polled >= 4, f"main polled only {polled} times while deliveries hung"
    assert pending(lockwatch) == 1
    assert (lockwatch.metric("lockwatch_notification_errors_total", channel="ops") or 0) >= 2

    standin.recover()
    wait_until(lambda: pending(lockwatch) == 0, message="the pending message delivered")
    (firing,) = standin.delivered("telegram")
    assert firing.text.startswith("🔥 OPENED: ")
    assert incident.holder is not None  # set by incident.start()
    assert f"root: pid {incident.holder.pid} · webhook-worker-1" in firing.text
    assert "runbook: LockwatchLockConvoy" in firing.text

    wait_until(lambda: notified(lockwatch), message="the delivery on the incident's timeline")

    end_convoy_and_expect_one_resolution(incident, standin)

    # The receiver has the resolution before lockwatch has its answer and
    # counts it sent (L6 read 1 in between, loaded).
    def sent() -> float:
        return lockwatch.metric("lockwatch_notifications_sent_total", channel="ops") or 0

    wait_until(lambda: sent() >= 2, message="the resolution counted as sent")
    assert sent() == 2


def notified(lockwatch: LockwatchProcess) -> list[dict[str, Any]]:
    """The ``notified`` events of the open incidents' timelines that name channel ops."""
    answer = requests.get(f"{lockwatch.base}/api/v1/incidents?state=open", timeout=5)
    answer.raise_for_status()
    return [
        event
        for found in answer.json()["incidents"]
        for event in found["timeline"]
        if event["event"] == "notified" and "ops" in event["detail"]
    ]


def test_restarts_neither_lose_a_pending_notification_nor_announce_an_open_incident_twice(
    lockwatch: LockwatchProcess, incident: ConvoyIncident, standin: ChatStandin
) -> None:
    convoy_to_a_receiver_that_hangs(lockwatch, incident, standin)
    lockwatch.kill()
    standin.recover()

    lockwatch.start()
    wait_until(
        lambda: lockwatch.metric("lockwatch_notifications_sent_total", channel="ops") == 1,
        message="the pending message delivered after a restart",
    )
    assert len(standin.delivered("telegram")) == 1
    assert "notify ops: restored 1 announced incidents and 1 pending messages" in lockwatch.log()

    lockwatch.kill()
    lockwatch.start()
    lockwatch.wait_polls(6)  # a few polls with the convoy still on
    assert lockwatch.finding("lock_convoy", "main") is not None
    assert len(standin.delivered("telegram")) == 1, "the firing convoy was announced again"
    end_convoy_and_expect_one_resolution(incident, standin)
