"""The seed incidents, made for real on real servers, sampled and detected.

lockwatch samples through a role that has only ``pg_monitor``. lockwatch's
own time (hold times from first sight) is moved forward by an injected clock,
wall and monotonic together, so budgets of minutes are crossed without waiting
for them; what the server dates (idle times, waits) is measured against the
server's own clock, so those budgets are crossed for real, in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from lockwatch.demo.scenarios import OrphanIncident
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.locks import LockKey
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.runner import TargetRunner
from lockwatch.sample.locks import read_advisory_locks
from lockwatch.settings.locks import AllowedHolders, LockRole, LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.metrics import scraped
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    Background,
    PgDatabase,
    advisory_holders,
    queue_on_lock,
    run_in_thread,
    wait_until,
)

pytestmark = pytest.mark.pg


@dataclass
class ShiftedClock:
    """Real time plus an offset the test moves forward."""

    offset: timedelta = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return time.monotonic() + self.offset.total_seconds()


RunnerFactory = Callable[[LockSettings, ShiftedClock], TargetRunner]


@pytest.fixture
def make_runner(pg: PgDatabase) -> Iterator[RunnerFactory]:
    """Runners polling the test database through the pg_monitor-only role."""
    runners: list[TargetRunner] = []

    def make(locks: LockSettings, clock: ShiftedClock) -> TargetRunner:
        target = Target("main", pg.monitor_dsn, interval=1.0, locks=locks)
        runners.append(
            TargetRunner(target, Board(), StateStore(None), clock, monotonic=clock.monotonic)
        )
        return runners[-1]

    yield make
    for runner in runners:
        runner.close()


def kinds(findings: tuple[Finding, ...]) -> set[str]:
    return {f.kind.value for f in findings}


def one(findings: tuple[Finding, ...], kind: FindingKind) -> Finding:
    matching = [f for f in findings if f.kind is kind]
    assert len(matching) == 1, f"expected one {kind.value}, got {findings}"
    return matching[0]


def waiting_count(pg: PgDatabase, key: int) -> int:
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND objid = %s AND database = (SELECT oid FROM pg_database WHERE datname = %s)",
            (key, pg.database),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def convoy(pg: PgDatabase) -> Iterator[dict[str, Any]]:
    """Seed 002: worker 1 holds lock 42 and sits idle (stuck in an HTTP call
    elsewhere); five workers wait for the lock."""
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    waiters = [pg.connect(f"webhook-worker-{n}") for n in range(2, 7)]
    blocked = [queue_on_lock(c, 42) for c in waiters]
    wait_until(lambda: waiting_count(pg, 42) == 5, message="five workers queued on lock 42")
    yield {
        "holder_pid": holder.info.backend_pid,
        "waiter_pids": {c.info.backend_pid for c in waiters},
    }
    holder.close()  # releases 42; the waiters drain one after another
    for call in blocked:
        call.join()


def _only(findings: tuple[Finding, ...], kind: FindingKind) -> Finding | None:
    return findings[0] if [f.kind for f in findings] == [kind] else None


def test_it_explains_a_convoy_behind_an_idle_holder_in_one_chain(
    pg: PgDatabase, convoy: dict[str, Any], make_runner: RunnerFactory
) -> None:
    clock = ShiftedClock()
    named = NamedLock("webhook-delivery", LockKey.bigint(42), max_hold=20.0)
    settings = LockSettings(orphan_after=1.0, convoy_wait=1.0, named=(named,))
    runner = make_runner(settings, clock)

    first = runner.poll_once()
    assert first.up, first.status
    # Hold times start when lockwatch first sees a lock, so nothing is "held too long" yet.
    assert "lock_held_too_long" not in kinds(first.findings)

    clock.advance(25)  # within the continuity gap: the hold goes on
    findings = wait_until(
        lambda: (
            (found := runner.poll_once().findings)
            and kinds(found) == {"lock_convoy", "lock_held_too_long", "lock_orphaned"}
            and found
        ),
        message="the convoy, its long hold and the orphan",
    )
    convoy_finding = one(findings, FindingKind.LOCK_CONVOY)
    assert convoy_finding.subject.database == pg.database
    assert convoy_finding.subject.lock == "webhook-delivery"
    evidence = evidence_as(convoy_finding, LockEvidence)
    assert evidence.key == "42"
    assert evidence.waiter_count == 5
    assert {w.pid for w in evidence.waiters} == convoy["waiter_pids"]
    (holder,) = evidence.holders
    assert holder.pid == convoy["holder_pid"]
    assert holder.application_name == "webhook-worker-1"
    assert holder.client_addr == "127.0.0.1"
    assert holder.state == "idle"
    assert "pg_advisory_lock(42)" in (holder.query or "")
    assert holder.held_seconds >= 25
    assert [step.pid for step in evidence.chain][-1] == convoy["holder_pid"]
    assert {r.kind.value for r in convoy_finding.related} == {"lock_held_too_long", "lock_orphaned"}
    assert {r.subject for r in convoy_finding.related} == {convoy_finding.subject}
    assert "5 sessions" in convoy_finding.summary


def test_the_next_in_line_of_a_draining_convoy_is_not_blamed_for_the_wait_before_it(
    pg: PgDatabase, make_runner: RunnerFactory
) -> None:
    # worker-1 holds 42; worker-2 queues and will keep the lock once it has
    # it (work of its own); worker-3 and -4 queue and let go at once.
    clock = ShiftedClock()
    runner = make_runner(LockSettings(convoy_wait=1.0), clock)
    first = pg.connect("webhook-worker-1")
    first.execute("SELECT pg_advisory_lock(42)")
    second = pg.connect("webhook-worker-2")
    keeps = run_in_thread(lambda: second.execute("SELECT pg_advisory_lock(42)"))
    wait_until(lambda: waiting_count(pg, 42) == 1, message="worker-2 queued")
    drains = [queue_on_lock(pg.connect(f"webhook-worker-{n}"), 42) for n in (3, 4)]
    wait_until(lambda: waiting_count(pg, 42) == 3, message="three workers queued")

    def convoy_of(pid: int) -> Finding | None:
        found = [f for f in runner.poll_once().findings if f.kind is FindingKind.LOCK_CONVOY]
        return next((f for f in found if evidence_as(f, LockEvidence).holders[0].pid == pid), None)

    wait_until(lambda: convoy_of(first.info.backend_pid), message="worker-1's convoy")
    first.close()  # worker-2 takes 42, the other two still wait (each since before it)
    keeps.result(timeout=30)
    next_in_line = second.info.backend_pid
    assert advisory_holders(pg.admin_dsn, 42) == [next_in_line]
    assert waiting_count(pg, 42) == 2
    assert convoy_of(next_in_line) is None, "worker-2 blamed for the wait behind worker-1"
    # Held past convoy_wait with the two still queued: now it is its convoy.
    clock.advance(2)
    finding = convoy_of(next_in_line)
    assert finding is not None
    assert evidence_as(finding, LockEvidence).waiter_count == 2
    second.close()
    for call in drains:
        call.join()


def test_it_finds_the_lock_left_on_an_idle_pooled_connection(
    pg: PgDatabase, make_runner: RunnerFactory
) -> None:
    incident = OrphanIncident(pg.admin_dsn)
    incident.start()
    try:
        clock = ShiftedClock()
        runner = make_runner(LockSettings(orphan_after=2.0), clock)
        assert runner.poll_once().findings == ()
        # The server dates idleness: lockwatch's clock moving on proves nothing.
        clock.advance(3600)
        assert runner.poll_once().findings == ()
        orphan = wait_until(
            lambda: _only(runner.poll_once().findings, FindingKind.LOCK_ORPHANED),
            message="the connection idles past orphan_after",
        )
        assert (orphan.subject.lock or "").startswith(f"pid {incident.pid} started ")
        assert evidence_as(orphan, LockEvidence).key == "7,13"
        assert evidence_as(orphan, LockEvidence).holders[0].pid == incident.pid
        assert evidence_as(orphan, LockEvidence).holders[0].application_name == "blog-generator"
        assert orphan.severity.value == "warning"
    finally:
        incident.stop()
    # The server ends the backend shortly after the client hangs up.
    wait_until(
        lambda: runner.poll_once().findings == (), message="closing the pool releases the orphan"
    )


def test_it_flags_a_holder_outside_the_allowed_applications(
    pg: PgDatabase, make_runner: RunnerFactory
) -> None:
    leader = NamedLock(
        "nightly-report",
        LockKey.int_pair(7, 13),
        role=LockRole.LEADER,
        database=pg.database,
        allowed=AllowedHolders(applications=("report-*",)),
    )
    runner = make_runner(LockSettings(named=(leader,)), ShiftedClock())
    dev_server = pg.connect("dev-laptop")
    dev_server.execute("SELECT pg_try_advisory_lock(7, 13)")

    finding = one(runner.poll_once().findings, FindingKind.LOCK_UNEXPECTED_HOLDER)
    assert evidence_as(finding, LockEvidence).holders[0].application_name == "dev-laptop"
    assert finding.subject.lock == "nightly-report"

    dev_server.execute("SELECT pg_advisory_unlock(7, 13)")
    pg.connect("report-nightly").execute("SELECT pg_try_advisory_lock(7, 13)")
    assert runner.poll_once().findings == ()


def test_it_reports_a_leader_lock_nobody_holds_until_someone_takes_it(
    pg: PgDatabase, make_runner: RunnerFactory
) -> None:
    leader = NamedLock(
        "scheduler-leader", LockKey.bigint(1001), role=LockRole.LEADER, database=pg.database
    )
    runner = make_runner(LockSettings(named=(leader,)), ShiftedClock())

    missing = one(runner.poll_once().findings, FindingKind.LEADER_LOCK_MISSING)
    assert missing.subject.lock == "scheduler-leader"

    pg.connect("scheduler").execute("SELECT pg_advisory_lock(1001)")
    assert runner.poll_once().findings == ()


def test_it_follows_the_chain_past_a_holder_that_waits_on_a_row_lock(
    pg: PgDatabase, make_runner: RunnerFactory
) -> None:
    setup = pg.connect("setup")
    setup.execute("CREATE TABLE jobs (id int PRIMARY KEY, state text)")
    setup.execute("INSERT INTO jobs VALUES (1, 'new')")
    row_holder = pg.connect("row-holder", autocommit=False)
    row_holder.execute("UPDATE jobs SET state = 'taken' WHERE id = 1")  # stays idle in transaction
    lock_holder = pg.connect("lock-holder")
    lock_holder.execute("SELECT pg_advisory_lock(42)")
    stuck = run_in_thread(
        lambda: lock_holder.execute("UPDATE jobs SET state = 'mine' WHERE id = 1")
    )
    waiter = pg.connect("waiter")
    queued = run_in_thread(lambda: waiter.execute("SELECT pg_advisory_lock(42)"))
    wait_until(lambda: waiting_count(pg, 42) == 1, message="waiter queued on 42")

    runner = make_runner(LockSettings(convoy_waiters=1, convoy_wait=0.0), ShiftedClock())
    convoy = wait_until(
        lambda: [f for f in runner.poll_once().findings if f.kind is FindingKind.LOCK_CONVOY],
        message="convoy on 42",
    )[0]
    chain = [step.pid for step in evidence_as(convoy, LockEvidence).chain]
    assert chain == [
        waiter.info.backend_pid,
        lock_holder.info.backend_pid,
        row_holder.info.backend_pid,
    ]
    assert evidence_as(convoy, LockEvidence).chain[1].wait_event_type == "Lock"
    assert evidence_as(convoy, LockEvidence).chain[2].state == "idle in transaction"

    row_holder.rollback()
    stuck.join()
    lock_holder.execute("SELECT pg_advisory_unlock(42)")
    queued.join()


def test_a_healthy_system_cycling_locks_thousands_of_times_gives_no_finding(
    pg: PgDatabase, make_runner: RunnerFactory
) -> None:
    runner = make_runner(LockSettings(), ShiftedClock())
    cycles_per_worker = 400
    workers = [pg.connect(f"healthy-worker-{n}") for n in range(4)]

    def cycle(conn: psycopg.Connection[Any], worker: int) -> int:
        for n in range(cycles_per_worker):
            key = 500 + (n + worker) % 3  # workers contend on a few keys
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            conn.execute("SELECT pg_sleep(0.002)")
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return cycles_per_worker

    calls = [run_in_thread(partial(cycle, c, w)) for w, c in enumerate(workers)]
    polls = seen_held = 0
    findings: list[Finding] = []
    while not all(call.done for call in calls):
        view = runner.poll_once()
        assert view.up, view.status
        polls += 1
        findings.extend(view.findings)
        assert view.status is not None and view.status.snapshot is not None
        seen_held += any(lock.granted for lock in view.status.snapshot.locks)
    assert sum(call.result() for call in calls) == 4 * cycles_per_worker
    assert findings == []
    assert polls > 10
    assert seen_held > 0, "the polls should have caught some of the locks in flight"


def test_lockwatch_samples_with_pg_monitor_alone_and_holds_no_lock_itself(
    pg: PgDatabase, make_runner: RunnerFactory
) -> None:
    holder = pg.connect("app")
    holder.execute("SELECT pg_advisory_lock(42)")
    runner = make_runner(LockSettings(), ShiftedClock())
    view = runner.poll_once()
    assert view.up, view.status
    assert view.status is not None and view.status.snapshot is not None
    (lock,) = view.status.snapshot.locks
    backend = view.status.snapshot.backends[lock.pid]
    assert "pg_advisory_lock(42)" in backend.query, "pg_monitor reads other sessions' queries"

    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        lockwatch_locks = admin.execute(
            "SELECT l.locktype FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE a.application_name = 'lockwatch' AND l.locktype = 'advisory'"
        ).fetchall()
        (member,) = admin.execute(
            "SELECT pg_has_role(%s, 'pg_monitor', 'MEMBER') AND NOT rolsuper"
            " FROM pg_roles WHERE rolname = %s",
            (pg.monitor_user, pg.monitor_user),
        ).fetchone() or (False,)
    assert lockwatch_locks == []
    assert member is True


def test_a_target_that_cannot_be_reached_is_down_without_showing_its_password(
    pg: PgDatabase,
) -> None:
    target = Target(
        "gone",
        f"postgresql://{pg.monitor_user}:{MONITOR_PASSWORD}@127.0.0.1:1/{pg.database}",
        connect_timeout=2.0,
    )
    runner = TargetRunner(target, Board(), StateStore(None), ShiftedClock())
    view = runner.poll_once()
    assert not view.up
    down = one(view.findings, FindingKind.TARGET_DOWN)
    assert view.status is not None and view.status.error
    for text in (view.status.error, down.summary, repr(down.evidence)):
        assert MONITOR_PASSWORD not in text
    assert "127.0.0.1:1" in view.status.error


def test_it_keeps_monitoring_and_counts_failed_saves_when_the_state_dir_is_unwritable(
    pg: PgDatabase, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the state dir's parent should be")
    board = Board()
    target = Target("main", pg.monitor_dsn, locks=LockSettings(max_hold=1.0))
    clock = ShiftedClock()
    runner = TargetRunner(
        target, board, StateStore(blocker / "state"), clock, monotonic=clock.monotonic
    )
    pg.connect("app").execute("SELECT pg_advisory_lock(42)")
    try:
        runner.poll_once()
        clock.advance(10)
        view = runner.poll_once()
    finally:
        runner.close()
    assert view.up
    assert kinds(view.findings) == {"lock_held_too_long"}
    assert view.state_write_errors_total == 2
    registry = scraped(Metrics(board))
    assert registry.get_sample_value("lockwatch_state_write_errors_total", {"target": "main"}) == 2


@pytest.mark.parametrize("version", [120000, 130000, 140000, 180000])
def test_the_query_for_each_server_version_runs_and_reads_waiters(
    pg: PgDatabase, version: int
) -> None:
    holder = pg.connect("holder")
    holder.execute("SELECT pg_advisory_lock(42)")
    waiter = pg.connect("waiter")
    queued = queue_on_lock(waiter, 42)
    wait_until(lambda: waiting_count(pg, 42) == 1, message="waiter queued")
    with psycopg.connect(pg.monitor_dsn, row_factory=dict_row) as conn:
        decoded, backends, *_ = read_advisory_locks(conn, version)
    locks = list(decoded.values())
    assert {(lock.pid, lock.granted) for lock in locks} == {
        (holder.info.backend_pid, True),
        (waiter.info.backend_pid, False),
    }
    (waiting,) = [lock for lock in locks if not lock.granted]
    # Before 14 there is no waitstart; lockwatch then dates waits from first sight.
    assert (waiting.wait_start is not None) == (version >= 140000)
    assert backends[waiter.info.backend_pid].blocked_by == (holder.info.backend_pid,)
    holder.execute("SELECT pg_advisory_unlock(42)")
    queued.join()


def superuser_sees(pg: PgDatabase, pid: int, key: int) -> tuple[bool, str | None]:
    """Whether ``pid`` holds advisory lock ``key`` (pg_locks), and its state
    (pg_stat_activity), as a superuser sees them."""
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        row = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return pid in advisory_holders(pg.admin_dsn, key), None if row is None else row[0]


@pytest.mark.parametrize("planned", ["contended", "overran"])
def test_a_gap_lockwatch_planned_keeps_a_busy_holders_hold_and_an_unplanned_one_does_not(
    pg: PgDatabase, planned: str
) -> None:
    """A worker takes a session lock, then runs a query: once its session is
    busy, only lockwatch's continuity says it held the lock between two polls.
    Polls 41 s apart, past the 30 s gap of a 10 s interval, keep its first
    sighting when lockwatch planned to wait that long (its pace slowed to one
    poll in 40 s while the lock manager was contended, or a poll that ended
    35 s after it was due skipped the slots to 40 s), and start a new hold
    when it did not (at its own pace, as after an outage)."""
    clock = ShiftedClock()
    target = Target("main", pg.monitor_dsn, interval=10.0, locks=LockSettings(max_hold=3600.0))
    board = Board()
    runner = TargetRunner(target, board, StateStore(None), clock, monotonic=clock.monotonic)
    holder = pg.connect("busy-worker")
    holder.execute("SELECT pg_advisory_lock(77)")  # seen idle first: a session lock
    pid = holder.info.backend_pid
    busy: Background[Any] | None = None

    def first_seen() -> datetime | None:
        view = board.view("main")
        assert view is not None and view.up and view.status is not None
        snapshot = view.status.snapshot
        assert snapshot is not None
        (lock,) = [lock for lock in snapshot.locks if lock.key == LockKey.bigint(77)]
        return lock.first_seen

    schedule = [0.0]
    runner.seat.clock = lambda: schedule[0]
    try:
        if planned == "contended":
            runner.pace.factor = 4  # one poll in 40 s
        else:
            schedule[0] = 35.0  # the poll due at 0 s ended then
        assert runner.run_due(0.0) == 40.0
        taken = first_seen()
        busy = run_in_thread(lambda: holder.execute("SELECT pg_sleep(600)"))
        wait_until(lambda: superuser_sees(pg, pid, 77) == (True, "active"), message="busy holder")
        clock.advance(41)
        runner.run_due(40.0)
        assert superuser_sees(pg, pid, 77) == (True, "active")  # held, and busy since the first
        assert first_seen() == taken

        runner.pace.factor = 1  # its own pace: a 41 s gap it did not plan
        schedule[0] = 40.0
        assert runner.run_due(40.0) == 50.0
        assert first_seen() == taken
        clock.advance(41)
        runner.run_due(50.0)
        assert superuser_sees(pg, pid, 77) == (True, "active")
        seen_again = first_seen()
        assert taken is not None and seen_again is not None
        assert seen_again - taken >= timedelta(seconds=41)  # a new hold, from this sighting
    finally:
        holder.cancel()
        if busy is not None:
            busy.join()
        holder.close()
        runner.close()
