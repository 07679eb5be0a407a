"""Receivers that answer oddly: Telegram's 200 from a proxy that is not Telegram's
JSON; a receiver slower than the read timeout that does process each request."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, Reply, add_telegram

pytestmark = [pytest.mark.pg, pytest.mark.slow]

PORTAL = b"<html><body>Please log in to the guest network</body></html>"


def sent(lockwatch: LockwatchProcess) -> float:
    return lockwatch.metric("lockwatch_notifications_sent_total", channel="ops") or 0


def pending(lockwatch: LockwatchProcess) -> float | None:
    return lockwatch.metric("lockwatch_notifications_pending", channel="ops")


def test_telegram_answering_200_with_a_body_that_is_not_its_json_is_retried(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    standin = ChatStandin()
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    add_telegram(config, standin)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    holder = battery_db.connect("nightly-report")
    standin.reply(Reply(200, PORTAL), Reply(200, b""), service="telegram")
    try:
        lockwatch.start()
        holder.execute("SELECT pg_advisory_lock(12)")
        wait_until(lambda: sent(lockwatch) == 1, timeout=30, message="the firing delivered")
        log = lockwatch.log()
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
        standin.close()
    assert stopped == 0, lockwatch.log(whole=True)
    statuses = [r.status for r in standin.requests("telegram")]
    assert statuses == [200, 200, 200], statuses
    said = [line for line in log.splitlines() if "notify ops" in line]
    assert not [line for line in said if "dropped" in line], said
    retrying = next(line for line in said if "retrying" in line)
    battery(
        "telegram-not-json",
        injected=(
            "Telegram's address answers 200 with an HTML captive portal, then 200 with an "
            "empty body, then as Telegram does"
        ),
        did=f"both taken as transient, retried with backoff: '{retrying.split(': ', 1)[1]}'",
        intact="yes: the message delivered on the third attempt, 0 dropped",
    )


def test_a_receiver_slower_than_read_timeout_gets_a_message_a_bounded_number_of_times(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    standin = ChatStandin()
    standin.slow(1.5)  # add_telegram's read_timeout is 1 s
    port = free_port()
    config = write_config(tmp_path, port, {"main": battery_db.monitor_dsn})
    add_telegram(config, standin)
    with config.open("a") as more:
        more.write("  unanswered_retries: 1\n")
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    holder = battery_db.connect("nightly-report")
    try:
        lockwatch.start()
        holder.execute("SELECT pg_advisory_lock(10)")
        wait_until(lambda: standin.delivered("telegram"), message="the firing processed")
        wait_until(lambda: pending(lockwatch) == 0, timeout=30, message="the outbox settles")
        polls = lockwatch.metric("lockwatch_polls_total", target="main") or 0
        wait_until(
            lambda: (lockwatch.metric("lockwatch_polls_total", target="main") or 0) >= polls + 6,
            message="a few more polls",
        )
        got = len(standin.delivered("telegram"))
        log = lockwatch.log()
    finally:
        stopped = lockwatch.stop() if lockwatch.proc is not None else 0
        standin.close()
    assert stopped == 0, lockwatch.log(whole=True)
    assert got == 2, f"the receiver got the message {got} times (1 + 1 retry allowed)"
    said = [line for line in log.splitlines() if "may have been delivered" in line]
    assert len(said) == 2, log
    gave_up = re.sub(
        r"http://127\.0\.0\.1:\d+", "the receiver", said[-1].split("notify ops: ", 1)[1]
    )
    battery(
        "receiver-slow",
        injected=(
            "a Telegram receiver that processes each request at once but answers 1.5 s "
            "later, past the 1 s read timeout; unanswered_retries: 1"
        ),
        did=(f"the timed-out request retried once, each time said in the log; then '{gave_up}'"),
        intact=(
            f"yes: the receiver got the message {got} times (the first and 1 retry); before, "
            "it was sent again with backoff for up to a day"
        ),
    )
