"""Seed 003 on a busy client pool (issue 18, part 3): a session lock left on a
pooled connection that the pool keeps lending to other short queries, so it
is never idle for ``orphan_after`` in one stretch. lockwatch says it is
orphaned once, keeps saying it while that connection holds the key, and
resolves it once."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from psycopg_pool import ConnectionPool

from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.ledger import Transitions
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

ORPHAN_AFTER = 2.0
WATCH = 6.0  # seconds of busy traffic watched while the lock is held


def traffic(pool: ConnectionPool, stop: threading.Event) -> None:
    """Short queries through the pool, as a web app's requests."""
    while not stop.is_set():
        with pool.connection() as conn:
            conn.execute("SELECT pg_sleep(0.005)")
        stop.wait(0.01)


def test_an_orphan_on_a_busy_pool_fires_once_and_resolves_once(pg: PgDatabase) -> None:
    pool = ConnectionPool(
        pg.admin_dsn,
        min_size=3,
        max_size=3,
        kwargs={"application_name": "blog-generator", "autocommit": True},
        open=False,
    )
    pool.open(wait=True, timeout=30)
    fired: list[tuple[float, FindingKind]] = []
    resolved: list[FindingKind] = []
    started = time.monotonic()

    def listen(transitions: Transitions) -> None:
        fired.extend((time.monotonic() - started, f.kind) for f in transitions.fired)
        resolved.extend(f.kind for f in transitions.resolved)

    target = Target(
        "main",
        pg.monitor_dsn,
        interval=0.2,
        locks=LockSettings(orphan_after=ORPHAN_AFTER, max_hold=3600.0),
    )
    runner = TargetRunner(target, Board(), StateStore(None), lambda: datetime.now(UTC), (listen,))
    stop = threading.Event()
    workers = [threading.Thread(target=traffic, args=(pool, stop), daemon=True) for _ in range(4)]
    try:
        with pool.connection() as conn:  # lock, and back to the pool without an unlock
            conn.execute("SELECT pg_try_advisory_lock(7, 13)")
            holder = conn.info.backend_pid
        started = time.monotonic()
        for worker in workers:
            worker.start()
        while time.monotonic() - started < WATCH:
            view = runner.poll_once()
            assert view.up, view.status
            time.sleep(0.2)
        orphans = [f for f in view.findings if f.kind is FindingKind.LOCK_ORPHANED]
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)
        pool.close()  # the holder's session ends, and its lock with it
    try:
        wait_until(
            lambda: not runner.poll_once().findings, message="the orphan resolves when it goes"
        )
    finally:
        runner.close()

    (orphan,) = orphans
    (first,) = evidence_as(orphan, LockEvidence).holders
    assert first.pid == holder
    assert "advisory_lock" not in (first.query or ""), "the pool lent the holder to others"
    times = [at for at, kind in fired if kind is FindingKind.LOCK_ORPHANED]
    assert len(times) == 1, fired
    assert ORPHAN_AFTER < times[0] < ORPHAN_AFTER + 2.0
    assert resolved.count(FindingKind.LOCK_ORPHANED) == 1
