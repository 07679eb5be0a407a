"""What a lock is, as the server knows it: transaction-level advisory locks
taken in short transactions through a transaction-mode pgbouncer (the pattern
``lockwatch doctor`` recommends), each one a hold of its own; locks held by a
prepared transaction, which has no session at all."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity
from lockwatch.model.locks import LockKey, LockSnapshot
from lockwatch.sample.base import SampleContext
from lockwatch.sample.locks import PgLockSampler
from lockwatch.sample.pooler import PgBouncerSampler
from lockwatch.settings.locks import LockRole, LockSettings, NamedLock
from lockwatch.state.holds import HoldTracker
from tests.battery.conftest import Record
from tests.fixtures.evidence import evidence_as, lock_of
from tests.fixtures.pgbouncer import STATS_USER, PgBouncer
from tests.fixtures.postgres import PgDatabase, queue_on_lock, run_in_thread, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

XACT_KEY, SESSION_KEY = 42, 7
TRANSACTIONS = 12  # of 0.3 s each: 3.6 s of one key held in short transactions
MAX_HOLD = 1.0
INTERVAL = 0.1


@pytest.fixture
def bouncer(battery_db: PgDatabase) -> Iterator[PgBouncer]:
    with psycopg.connect(battery_db.server.dsn(), autocommit=True) as admin:
        for role in ("app", STATS_USER):
            exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if not exists:
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT ALL ON DATABASE {} TO app").format(sql.Identifier(battery_db.database))
        )
    with PgBouncer(battery_db.server, pool_mode="transaction", pool_size=2) as running:
        yield running


class Watcher:
    """The lock monitor's steps, poll after poll, with pgbouncer's view joined."""

    def __init__(self, db: PgDatabase, bouncer: PgBouncer) -> None:
        self.locks = PgLockSampler(db.monitor_dsn)
        self.pooler = PgBouncerSampler(bouncer.admin_dsn())
        self.tracker = HoldTracker(continuity_gap=30)
        self.polls = 0
        self.longest_xact_hold = 0.0

    def findings(self) -> list[Finding]:
        raw = self.locks.sample()
        now = datetime.now(UTC)
        pool = self.pooler.sample(SampleContext(now, None))
        locks = self.tracker.observe(raw.locks, raw.backends, now, raw.read_at)
        self.polls += 1
        for lock in locks:
            if lock.key == LockKey.bigint(XACT_KEY) and lock.granted and lock.first_seen:
                held = (now - lock.first_seen).total_seconds()
                self.longest_xact_hold = max(self.longest_xact_hold, held)
        snapshot = LockSnapshot("main", now, raw.server_version, locks, raw.backends)
        return detect_locks(snapshot, LockSettings(max_hold=MAX_HOLD), now, pool)

    def close(self) -> None:
        self.locks.close()
        self.pooler.close()


def _client(bouncer: PgBouncer, db: PgDatabase, name: str) -> psycopg.Connection[Any]:
    # No server-side prepared statements: pgbouncer 1.18 in transaction mode has none.
    return psycopg.connect(
        bouncer.dsn(db.database), autocommit=True, application_name=name, prepare_threshold=None
    )


def test_short_transactions_on_one_xact_lock_are_holds_of_their_own(
    battery_db: PgDatabase, bouncer: PgBouncer, battery: Record
) -> None:
    worker = _client(bouncer, battery_db, "xact-worker")
    leader = _client(bouncer, battery_db, "session-leader")
    watcher = Watcher(battery_db, bouncer)
    done = threading.Event()

    def short_transactions() -> None:
        try:
            for _ in range(TRANSACTIONS):
                with worker.transaction():
                    worker.execute("SELECT pg_advisory_xact_lock(%s)", (XACT_KEY,))
                    worker.execute("SELECT pg_sleep(0.3)")
        finally:
            done.set()

    seen: dict[tuple[str, str], int] = {}
    try:
        # The control: a session lock through the same pool is still pooled.
        leader.execute("SELECT pg_advisory_lock(%s)", (SESSION_KEY,))
        watcher.findings()  # lockwatch was watching when the leader took its lock
        loop = run_in_thread(short_transactions)
        while not done.wait(INTERVAL):  # the watcher's poll interval
            for finding in watcher.findings():
                name = (finding.kind.value, lock_of(finding) or "")
                seen[name] = seen.get(name, 0) + 1
        loop.result()
    finally:
        watcher.close()
        worker.close()
        leader.close()

    false = {name: n for name, n in seen.items() if name[1] == str(XACT_KEY)}
    assert not false, f"false findings on the transaction lock: {false}"
    assert watcher.longest_xact_hold < MAX_HOLD
    assert ("lock_held_too_long", str(SESSION_KEY)) in seen
    assert (FindingKind.LOCK_POOLED_SESSION.value, str(SESSION_KEY)) in seen
    battery(
        "xact-locks",
        injected=(
            f"BEGIN; pg_advisory_xact_lock({XACT_KEY}); 0.3 s; COMMIT, {TRANSACTIONS} times "
            "in a row through pgbouncer (transaction mode); a session lock "
            f"({SESSION_KEY}) through the same pool; max_hold {MAX_HOLD:.0f} s"
        ),
        did=(
            f"{watcher.polls} polls {INTERVAL} s apart: each transaction a hold of its own (longest "
            f"{watcher.longest_xact_hold:.2f} s); the session lock found pooled and held too long"
        ),
        intact=f"yes: 0 findings on the transaction lock in {watcher.polls} polls",
    )


PREPARED_KEY, LEADER_KEY = 42, 43
GIDS = ("lw-battery-job", "lw-battery-leader")


def _prepare(db: PgDatabase, key: int, gid: str) -> None:
    """A transaction that takes ``key`` and is prepared: its session goes, the lock stays."""
    with psycopg.connect(db.admin_dsn, application_name="two-phase") as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))


def _roll_back_prepared(db: PgDatabase) -> None:
    with psycopg.connect(db.admin_dsn, autocommit=True) as admin:
        for (gid,) in admin.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid = ANY(%s)", (list(GIDS),)
        ).fetchall():
            admin.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def _having(
    found: dict[tuple[str, str], Finding], kind_and_lock: tuple[str, str]
) -> dict[tuple[str, str], Finding] | None:
    return found if kind_and_lock in found else None


def test_locks_of_a_prepared_transaction_are_held_by_it_and_judged(
    battery_db: PgDatabase, battery: Record
) -> None:
    settings = LockSettings(
        max_hold=MAX_HOLD,
        orphan_after=MAX_HOLD,
        named=(NamedLock("leader", LockKey.bigint(LEADER_KEY), role=LockRole.LEADER),),
    )
    sampler = PgLockSampler(battery_db.monitor_dsn)
    tracker = HoldTracker(continuity_gap=30)
    polls = 0

    def findings() -> dict[tuple[str, str], Finding]:
        nonlocal polls
        raw = sampler.sample()
        now = datetime.now(UTC)
        locks = tracker.observe(raw.locks, raw.backends, now, raw.read_at)
        snapshot = LockSnapshot("main", now, raw.server_version, locks, raw.backends)
        polls += 1
        return {(f.kind.value, lock_of(f) or ""): f for f in detect_locks(snapshot, settings, now)}

    try:
        _prepare(battery_db, PREPARED_KEY, GIDS[0])
        _prepare(battery_db, LEADER_KEY, GIDS[1])
        waiter = battery_db.connect("queued-worker")
        queued = queue_on_lock(waiter, PREPARED_KEY)
        found = wait_until(
            lambda: _having(findings(), ("lock_orphaned", str(PREPARED_KEY))),
            message="the prepared transaction's lock is an orphan",
        )
    finally:
        sampler.close()
        _roll_back_prepared(battery_db)
    queued.result()  # the rollback released the lock to the waiter

    assert ("leader_lock_missing", "leader") not in found
    orphan = evidence_as(found[("lock_orphaned", str(PREPARED_KEY))], LockEvidence)
    (holder,) = orphan.holders
    assert holder.prepared is not None
    assert (holder.prepared.gid, holder.prepared.owner, holder.prepared.database) == (
        GIDS[0],
        "postgres",
        battery_db.database,
    )
    assert holder.held_seconds >= MAX_HOLD  # rounded to 0.1 s
    assert orphan.waiter_count == 1
    orphaned = found[("lock_orphaned", str(PREPARED_KEY))]
    assert orphaned.severity is Severity.CRITICAL
    assert f"prepared transaction '{GIDS[0]}'" in orphaned.summary
    assert ("lock_held_too_long", str(PREPARED_KEY)) in found
    battery(
        "prepared-xact",
        injected=(
            f"pg_advisory_xact_lock({PREPARED_KEY}) and of leader lock {LEADER_KEY}, each in a "
            "transaction then PREPARE TRANSACTION (no session left holding them); a worker "
            f"queued on {PREPARED_KEY}"
        ),
        did=(
            f"in {polls} polls: lock {PREPARED_KEY} held by prepared transaction "
            f"{GIDS[0]!r} (owner, database, prepared time in the evidence): "
            "lock_orphaned (critical) and lock_held_too_long; the leader held by "
            f"{GIDS[1]!r}, not missing"
        ),
        intact="yes: both holders shown, 0 leader_lock_missing; rolled back, the worker got the lock",
    )
