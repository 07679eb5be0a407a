"""Every supported PostgreSQL major, 12 to 18, on a real server the tests start:
the lock sampler, the lock detectors' incidents and ``lockwatch doctor``.

The full suite runs on 18 and 15 (``pg_server``); this module is the matrix
(``pg_any_version``), kept to what differs between versions or could: the SQL
(``waitstart`` is 14+), pg_stat_activity, prepared transactions, the
transaction-level locks, and what doctor reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from lockwatch.cli import main
from lockwatch.demo.scenarios import OrphanIncident
from lockwatch.model.evidence import LockEvidence, PooledLockEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.locks import AdvisoryLock, LockKey
from lockwatch.runner import TargetRunner
from lockwatch.sample.locks import PgLockSampler, RawSample
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.pooler import PoolerSpec
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as, pgbouncer_facts
from tests.fixtures.pgbouncer import STATS_USER, PgBouncer
from tests.fixtures.postgres import MONITOR_PASSWORD, PgDatabase, queue_on_lock, wait_until

pytestmark = pytest.mark.pg


@pytest.fixture
def sampler(pg_version_db: PgDatabase) -> Iterator[PgLockSampler]:
    sampling = PgLockSampler(pg_version_db.monitor_dsn)
    yield sampling
    sampling.close()


@pytest.fixture
def runners() -> Iterator[list[TargetRunner]]:
    made: list[TargetRunner] = []
    yield made
    for runner in made:
        runner.close()


def runner_for(made: list[TargetRunner], target: Target) -> TargetRunner:
    made.append(TargetRunner(target, Board(), StateStore(None)))
    return made[-1]


def waiting(pg: PgDatabase, count: int) -> bool:
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
            " WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = %s",
            (pg.database,),
        ).fetchone()
    return row is not None and int(row[0]) == count


def by_key(sample: RawSample) -> dict[tuple[str, bool], AdvisoryLock]:
    return {(lock.key.render(), lock.granted): lock for lock in sample.locks}


def one(findings: tuple[Finding, ...], kind: FindingKind) -> Finding:
    matching = [f for f in findings if f.kind is kind]
    assert len(matching) == 1, f"expected one {kind.value}, got {findings}"
    return matching[0]


def test_the_sampler_reads_both_key_forms_holders_and_waiters(
    pg_version_db: PgDatabase, sampler: PgLockSampler
) -> None:
    pg = pg_version_db
    holder, waiter = pg.connect("holder"), pg.connect("waiter")
    holder.execute("SELECT pg_advisory_lock(%s)", (2**40 + 42,))
    holder.execute("SELECT pg_advisory_lock_shared(7, 13)")
    queued = queue_on_lock(waiter, 2**40 + 42)
    wait_until(lambda: waiting(pg, 1), message="waiter queued")

    sample = sampler.sample()
    assert sample.server_version // 10000 == pg.major_version
    locks = by_key(sample)
    assert set(locks) == {(str(2**40 + 42), True), ("7,13", True), (str(2**40 + 42), False)}
    assert locks["7,13", True].mode == "ShareLock"
    assert locks["7,13", True].pid == holder.info.backend_pid
    waits = locks[str(2**40 + 42), False]
    assert waits.pid == waiter.info.backend_pid
    # pg_locks.waitstart exists from 14 on; before, lockwatch dates waits from first sight.
    assert (waits.wait_start is not None) == (pg.major_version >= 14)
    assert sample.backends[waiter.info.backend_pid].blocked_by == (holder.info.backend_pid,)
    assert sample.backends[holder.info.backend_pid].application_name == "holder"
    assert by_key(sampler.sample()) == locks, "the second, guessed poll reads the same"

    holder.execute("SELECT pg_advisory_unlock_all()")
    queued.join()
    assert sampler.sample().locks == ()


def test_a_convoy_behind_an_idle_holder(
    pg_version_db: PgDatabase, runners: list[TargetRunner]
) -> None:
    pg = pg_version_db
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    queued = [queue_on_lock(pg.connect(f"webhook-worker-{n}"), 42) for n in range(2, 5)]
    wait_until(lambda: waiting(pg, 3), message="three workers queued on 42")
    # Waits are dated by the server (waitstart, 14+) or from lockwatch's first
    # sight of them (before 14): both only age in real time, so the budget is short.
    locks = LockSettings(convoy_waiters=3, convoy_wait=0.5)
    runner = runner_for(runners, Target("main", pg.monitor_dsn, interval=1.0, locks=locks))
    assert runner.poll_once().up
    found = wait_until(
        lambda: [f for f in runner.poll_once().findings if f.kind is FindingKind.LOCK_CONVOY],
        message="a convoy on 42",
    )
    (convoy,) = found
    assert (evidence_as(convoy, LockEvidence).longest_wait_seconds or 0) >= 0.5
    assert evidence_as(convoy, LockEvidence).waiter_count == 3
    assert [h.pid for h in evidence_as(convoy, LockEvidence).holders] == [holder.info.backend_pid]
    assert evidence_as(convoy, LockEvidence).holders[0].state == "idle"
    assert evidence_as(convoy, LockEvidence).chain[-1].pid == holder.info.backend_pid
    holder.close()
    for call in queued:
        call.join()


def test_snapshot_sees_a_convoy_by_its_count_where_waits_are_not_dated(
    pg_version_db: PgDatabase,
) -> None:
    """``lockwatch snapshot`` is one look: before 14 the server dates no wait,
    so it says the waiters are there, not how long (never "0s"), and judges
    the convoy by its count; from 14 on, by the server's waitstart."""
    pg = pg_version_db
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    queued = [queue_on_lock(pg.connect(f"webhook-worker-{n}"), 42) for n in range(2, 5)]
    wait_until(lambda: waiting(pg, 3), message="three workers queued on 42")
    result = CliRunner().invoke(main, ["snapshot", "--dsn", pg.monitor_dsn])
    if pg.major_version < 14:
        assert result.exit_code == 1, result.output
        assert "3 session(s) waiting, for how long unknown" in result.output
        assert "lock_convoy [critical]: 3 sessions wait on lock 42" in result.output
        assert "for how long unknown (no waitstart before PostgreSQL 14)" in result.output
        assert "longest 0s" not in result.output
    else:
        # The default convoy_wait is 5 s: dated waits this young are not one yet.
        assert "3 session(s) waiting, longest " in result.output
        assert "unknown" not in result.output
    holder.close()
    for call in queued:
        call.join()


def test_an_orphan_left_on_a_pooled_client_connection(
    pg_version_db: PgDatabase, runners: list[TargetRunner]
) -> None:
    incident = OrphanIncident(pg_version_db.admin_dsn)
    incident.start()
    try:
        # The server dates how long the holder has been idle: a short real budget.
        target = Target("main", pg_version_db.monitor_dsn, locks=LockSettings(orphan_after=1.0))
        runner = runner_for(runners, target)
        found = wait_until(
            lambda: [f for f in runner.poll_once().findings if f.kind is FindingKind.LOCK_ORPHANED],
            message="the orphan on 7,13",
        )
        (orphan,) = found
        assert (orphan.subject.lock or "").startswith(f"pid {incident.pid} started ")
        assert evidence_as(orphan, LockEvidence).key == "7,13"
        assert evidence_as(orphan, LockEvidence).holders[0].pid == incident.pid
    finally:
        incident.stop()


def create_pooler_roles(pg: PgDatabase) -> None:
    with psycopg.connect(pg.server.dsn(), autocommit=True) as admin:
        for role in ("scheduler", STATS_USER):
            exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if not exists:
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT ALL ON DATABASE {} TO scheduler").format(sql.Identifier(pg.database))
        )


def test_a_session_lock_on_a_transaction_pooled_server_connection(
    pg_version_db: PgDatabase, runners: list[TargetRunner]
) -> None:
    pg = pg_version_db
    create_pooler_roles(pg)
    with (
        PgBouncer(pg.server, pool_mode="transaction", pool_size=2) as bouncer,
        psycopg.connect(
            bouncer.dsn(pg.database, user="scheduler"), autocommit=True, prepare_threshold=None
        ) as app,
    ):
        row = app.execute("SELECT pg_try_advisory_lock(1001)").fetchone()
        assert row is not None and row[0] is True
        target = Target(
            "main", pg.monitor_dsn, pgbouncer=PoolerSpec(bouncer.admin_dsn()), interval=1.0
        )
        runner = runner_for(runners, target)
        pooled = wait_until(
            lambda: [
                f for f in runner.poll_once().findings if f.kind is FindingKind.LOCK_POOLED_SESSION
            ],
            message="lock_pooled_session",
        )
        (finding,) = pooled
        assert pgbouncer_facts(finding)[0].pool_mode == "transaction"
        assert pgbouncer_facts(finding)[0].user == "scheduler"
        backend_pid = pgbouncer_facts(finding)[1].backend_pid
        assert backend_pid in {h.pid for h in evidence_as(finding, PooledLockEvidence).holders}


def test_locks_of_a_prepared_transaction_are_held_by_it(
    pg_version_db: PgDatabase, sampler: PgLockSampler
) -> None:
    """A prepared transaction keeps its transaction-level advisory locks with no
    session: pg_locks lists them with pid NULL, and lockwatch shows them held by
    the prepared transaction (its gid), on every major."""
    pg = pg_version_db
    gid = "lw-" + uuid.uuid4().hex[:12]
    preparer = pg.connect("preparer", autocommit=False)
    preparer.execute("SELECT pg_advisory_xact_lock(555)")
    preparer.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    try:
        other = pg.connect("other")
        row = other.execute("SELECT pg_try_advisory_lock(555)").fetchone()
        assert row is not None and row[0] is False, "the prepared transaction holds 555"
        with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory' AND objid = 555"
            ).fetchall()
        assert rows == [(None, True)]
        (lock,) = sampler.sample().locks
        assert lock.granted and lock.key == LockKey.bigint(555)
        assert lock.prepared is not None and lock.prepared.gid == gid
    finally:
        with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def test_transaction_level_locks_are_seen_until_the_transaction_ends(
    pg_version_db: PgDatabase, sampler: PgLockSampler
) -> None:
    pg = pg_version_db
    worker = pg.connect("xact-worker", autocommit=False)
    worker.execute("SELECT pg_advisory_xact_lock(77)")
    worker.execute("SELECT pg_advisory_xact_lock_shared(3, 4)")
    sample = sampler.sample()
    assert set(by_key(sample)) == {("77", True), ("3,4", True)}
    backend = sample.backends[worker.info.backend_pid]
    assert backend.state == "idle in transaction"
    assert backend.xact_start is not None
    worker.commit()
    assert sampler.sample().locks == ()


def test_doctor_on_a_direct_dsn(pg_version_db: PgDatabase) -> None:
    pg = pg_version_db
    result = CliRunner().invoke(main, ["doctor", "--monitoring", "--dsn", pg.monitor_dsn])
    assert result.exit_code == 0, result.output
    assert "SAFE for session state" in result.output
    assert "role has pg_monitor yes" in result.output
    server_line = next(line for line in result.output.splitlines() if "server version" in line)
    assert server_line.split()[-1].startswith(f"{pg.major_version}.")
    assert MONITOR_PASSWORD not in result.output
