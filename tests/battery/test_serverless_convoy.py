"""A serverless target whose clients call themselves ``lockwatch``: a convoy
of them must keep the target awake (it slept, since the sleep test looked at
application names only)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

KEY = 7007
WAITERS = 2
POLLS = 8  # watched after the convoy fired: none of them may be asleep


def test_a_convoy_of_clients_named_lockwatch_keeps_a_serverless_target_awake(
    tmp_path: Path, battery_db: PgDatabase, battery: Record
) -> None:
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"main": battery_db.monitor_dsn},
        extra={"main": "serverless: true\nsleep: {after: 1s, interval: 1h}"},
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    holder = battery_db.connect("lockwatch")
    holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    waiters = [battery_db.connect("lockwatch") for _ in range(WAITERS)]
    threads = [
        # autocommit: each waiter lets go as soon as it got the lock, and ends
        threading.Thread(target=w.execute, args=("SELECT pg_advisory_xact_lock(%s)", (KEY,)))
        for w in waiters
    ]
    for thread in threads:
        thread.start()
    lockwatch.start()
    try:
        wait_until(lambda: lockwatch.finding("lock_convoy", "main"), timeout=30)
        asleep: list[float | None] = []
        start = lockwatch.metric("lockwatch_polls_total", target="main") or 0

        def polled() -> bool:
            asleep.append(lockwatch.metric("lockwatch_target_asleep", target="main"))
            return (lockwatch.metric("lockwatch_polls_total", target="main") or 0) >= start + POLLS

        wait_until(polled, timeout=30, message=f"{POLLS} more polls (not asleep)")
        still = lockwatch.finding("lock_convoy", "main")
    finally:
        holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
        for thread in threads:
            thread.join(timeout=10)
        lockwatch.stop()
    assert set(asleep) == {0.0}, asleep
    assert still is not None
    battery(
        "serverless-named",
        injected=(
            "a serverless target (sleep after 1 s alone); a holder and "
            f"{WAITERS} waiters on one key, every client with application_name 'lockwatch'"
        ),
        did=(
            f"lock_convoy fired and the target stayed awake: {POLLS} more polls at its "
            "interval, lockwatch_target_asleep 0 at every scrape"
        ),
        intact="yes: a name did not make the clients invisible; the convoy stayed told",
    )
