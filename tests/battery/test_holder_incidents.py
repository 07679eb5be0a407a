"""No leaking session hidden behind another (issue 28 item 1, issue 31 item 1):
past the per-kind cap of lock findings, each holding session is still the root
of its own incident, with its own message and its own alert series, and the
counts each incident gives are its session's. Ground truth: ``pg_locks`` per
pid, the Telegram stand-in's log, ``/metrics``."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from tests.battery.conftest import Record
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.standins import ChatStandin, add_telegram

pytestmark = [pytest.mark.pg, pytest.mark.slow]

INCIDENT_SERIES = re.compile(r'^lockwatch_incident_active\{[^}]*target="main"[^}]*\} 1', re.M)


def take(conn: psycopg.Connection[Any], first: int, count: int) -> None:
    conn.execute(
        "SELECT count(pg_advisory_lock(k)) FROM generate_series(%s::bigint, %s) AS k",
        (first, first + count - 1),
    )


def held_by_pid(db: PgDatabase) -> dict[int, int]:
    """pg_locks' own count of advisory locks granted to each session of the database."""
    with psycopg.connect(db.admin_dsn, autocommit=True) as watcher:
        rows = watcher.execute(
            "SELECT l.pid, count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
            " WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()"
            " GROUP BY l.pid"
        ).fetchall()
    return {int(pid): int(count) for pid, count in rows}


def open_incidents(lockwatch: LockwatchProcess) -> list[dict[str, Any]]:
    response = requests.get(f"{lockwatch.base}/api/v1/incidents?limit=100", timeout=10)
    response.raise_for_status()
    return [i for i in response.json()["incidents"] if i["state"] != "resolved"]


def incident_series(lockwatch: LockwatchProcess) -> list[str]:
    text = requests.get(f"{lockwatch.base}/metrics", timeout=10).text
    return INCIDENT_SERIES.findall(text)


def one_each(
    lockwatch: LockwatchProcess, standin: ChatStandin, pids: list[int], expected: Callable[[], Any]
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Waits for one open incident per pid, one message each, one alert series
    each; then two more polls, and looks again: nothing else came."""
    wait_until(
        lambda: sorted(i["root"]["pid"] for i in open_incidents(lockwatch)) == sorted(pids),
        timeout=120,
        message=f"one incident for each of {len(pids)} sessions",
    )
    wait_until(
        lambda: len(standin.delivered("telegram")) >= len(pids),
        timeout=120,
        message="a message for each incident",
    )
    polls = lockwatch.metric("lockwatch_polls_total", target="main") or 0
    wait_until(
        lambda: (lockwatch.metric("lockwatch_polls_total", target="main") or 0) >= polls + 2,
        timeout=120,
        message="two more polls",
    )
    expected()
    messages = [m.text for m in standin.delivered("telegram")]
    return open_incidents(lockwatch), messages, incident_series(lockwatch)


def test_a_session_with_ten_locks_is_not_hidden_behind_one_with_150(
    tmp_path: Path, battery_db: PgDatabase, standin: ChatStandin, battery: Record
) -> None:
    big = battery_db.connect("flood-150")
    small = battery_db.connect("leak-10")
    take(big, 1, 150)  # the lowest keys: every one-by-one finding is big's
    take(small, 1001, 10)
    pids = [big.info.backend_pid, small.info.backend_pid]
    port = free_port()
    config = write_config(
        tmp_path, port, {"main": battery_db.monitor_dsn}, locks="{max_hold: 1s, orphan_after: 1h}"
    )
    add_telegram(config, standin)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    lockwatch.start()
    try:
        incidents, messages, series = one_each(lockwatch, standin, pids, lambda: None)
        truth = held_by_pid(battery_db)
    finally:
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)

    assert truth == {pids[0]: 150, pids[1]: 10}
    counts = {i["root"]["pid"]: i["impact"]["locks_held"] for i in incidents}
    assert counts == truth
    assert len(messages) == 2, messages
    for pid in pids:
        assert sum(f"pid {pid}" in text for text in messages) == 1, (pid, messages)
    assert len(series) == 2, series
    for pid in pids:
        assert sum(f'pid="{pid}"' in line for line in series) == 1, (pid, series)
    battery(
        "holder-behind-holder",
        injected=(
            "two sessions hold over-budget advisory locks: 150 (keys 1-150) and 10 (keys 1001-1010)"
        ),
        did=(
            "two incidents, each with its own session as root and its own count "
            f"({counts[pids[0]]} and {counts[pids[1]]} locks, as pg_locks says), two Telegram "
            "messages, two lockwatch_incident_active series"
        ),
        intact=(
            "yes: the 10-lock session is its own incident (before: no incident, message or "
            "alert for it: its locks folded into the first session's overflow finding)"
        ),
    )


def test_ten_sessions_with_5000_orphaned_locks_each_are_ten_incidents(
    tmp_path: Path, battery_db: PgDatabase, standin: ChatStandin, battery: Record
) -> None:
    sessions = [battery_db.connect(f"flood{n}") for n in range(10)]
    for n, conn in enumerate(sessions):
        take(conn, 1 + n * 5000, 5000)
    pids = [conn.info.backend_pid for conn in sessions]
    port = free_port()
    config = write_config(
        tmp_path,
        port,
        {"main": battery_db.monitor_dsn},
        locks="{max_hold: 1h, orphan_after: 1s}",
        extra={"main": "interval: 2s\nstatement_timeout: 20s"},
    )
    add_telegram(config, standin)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    lockwatch.start()
    try:
        incidents, messages, series = one_each(lockwatch, standin, pids, lambda: None)
        truth = held_by_pid(battery_db)
    finally:
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)

    assert truth == dict.fromkeys(pids, 5000)
    counts = {i["root"]["pid"]: i["impact"]["locks_held"] for i in incidents}
    assert counts == truth
    assert all("lock_orphaned" in i["kinds"] for i in incidents)
    assert len(messages) == 10, messages
    for pid in pids:
        assert sum(f"pid {pid}" in text for text in messages) == 1, (pid, messages)
    assert len(series) == 10, series
    battery(
        "ten-leaking-sessions",
        injected="10 idle sessions hold 5,000 advisory locks each, all orphaned",
        did=(
            "10 incidents, one per session, each counting its own 5,000 locks as pg_locks "
            "does; 10 Telegram messages; 10 lockwatch_incident_active series"
        ),
        intact=(
            "yes: every session told (before: one incident, one message and one alert for "
            "the first session; its next step left 45,000 locks held)"
        ),
    )
