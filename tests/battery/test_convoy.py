"""A big convoy: one holder and 2,000 waiters on one advisory key, on a server
of its own with room for them. lockwatch keeps polling and reports one
lock_convoy with the count, where asking pg_blocking_pids() of every waiter
(each answer names the holder and every waiter ahead: N^2 pids) made every
poll hit statement_timeout past a few hundred waiters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.battery.conftest import Record
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

WAITERS = 2_000
KEY = 42
# Waiters past deadlock_timeout each run the deadlock check over the whole
# queue; an hour keeps setting the convoy up linear (the check is not tested here).
SETTINGS = {"max_connections": str(WAITERS + 30), "deadlock_timeout": "1h"}


@pytest.fixture(scope="module")
def big_server() -> Iterator[LocalCluster]:
    with LocalCluster(embedded_bin_dir(), settings=SETTINGS) as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


def _queue(server: LocalCluster, count: int) -> list[psycopg.Connection[Any]]:
    """``count`` sessions queued on KEY, each left waiting without a thread:
    the query is sent and its answer never read."""
    queued = []
    for n in range(count):
        conn = psycopg.connect(server.dsn(), autocommit=True, application_name=f"worker-{n}")
        conn.pgconn.send_query(f"SELECT pg_advisory_lock({KEY})".encode())
        queued.append(conn)
    return queued


def test_two_thousand_waiters_on_one_key_are_one_convoy_polled_in_time(
    big_server: LocalCluster, battery: Record
) -> None:
    holder = psycopg.connect(big_server.dsn(), autocommit=True, application_name="holder")
    holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    queued = _queue(big_server, WAITERS)
    target = Target(
        "big",
        big_server.dsn(user=MONITOR_USER, password=MONITOR_PASSWORD),
        interval=1.0,
        statement_timeout=5.0,
        locks=LockSettings(convoy_wait=0.0),
    )
    runner = TargetRunner(target, Board(), StateStore(None))
    try:
        view = wait_until(
            lambda: (
                (seen := runner.poll_once()).status is not None
                and seen.status.snapshot is not None
                and sum(not lock.granted for lock in seen.status.snapshot.locks) == WAITERS
                and seen
            ),
            timeout=60,
            message=f"lockwatch sees the {WAITERS} waiters",
        )
        polls = [runner.poll_once() for _ in range(3)]
    finally:
        runner.close()
        holder.close()
        big_server.stop()  # ends every waiting backend at once
        for conn in queued:
            conn.close()
        big_server.start()
    assert all(p.up for p in (view, *polls)), [p.status for p in polls]
    (convoy,) = [f for f in polls[-1].findings if f.kind is FindingKind.LOCK_CONVOY]
    evidence = evidence_as(convoy, LockEvidence)
    assert evidence.waiter_count == WAITERS
    assert f"{WAITERS} sessions wait on lock {KEY}" in convoy.summary
    assert evidence.chain[-1].application_name == "holder"
    assert {f.kind for f in polls[-1].findings} <= {
        FindingKind.LOCK_CONVOY,
        FindingKind.LOCK_HELD_TOO_LONG,
    }
    seconds = sorted(
        p.status.snapshot.poll_seconds for p in polls if p.status and p.status.snapshot
    )
    battery(
        "big-convoy",
        injected=(
            f"one holder and {WAITERS:,} sessions queued on advisory lock {KEY} "
            "(max_connections raised); statement_timeout 5 s"
        ),
        did=(
            f"every poll up: one lock_convoy with {WAITERS:,} waiters and the chain to the "
            f"holder; lock read {seconds[len(seconds) // 2]:.2f} s (median of {len(seconds)})"
        ),
        intact="yes: no target_down, every waiter counted",
    )
