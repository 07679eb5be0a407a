"""Seed 000 through a real pgbouncer in transaction mode: session advisory
locks that belong to no client, seen by joining SHOW SERVERS to pg_locks."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import psycopg2
import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from click.testing import CliRunner
from psycopg import sql

from lockwatch.cli import main
from lockwatch.detect.locks import detect_locks
from lockwatch.model.evidence import LockEvidence, PooledLockEvidence
from lockwatch.model.evidence.json_form import object_json
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.model.locks import LockKey, LockSnapshot
from lockwatch.runner import TargetRunner
from lockwatch.sample.base import SampleContext
from lockwatch.sample.locks import PgLockSampler
from lockwatch.sample.pooler import PgBouncerSampler
from lockwatch.settings.locks import AllowedHolders, LockRole, LockSettings, NamedLock
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.holds import HoldTracker
from lockwatch.state.statefile import StateStore
from lockwatch.text import format_duration
from tests.fixtures.evidence import evidence_as, pgbouncer_facts
from tests.fixtures.pgbouncer import STATS_USER, PgBouncer
from tests.fixtures.postgres import MONITOR_PASSWORD, PgDatabase

pytestmark = pytest.mark.pg


@pytest.fixture
def bouncer(pg: PgDatabase) -> Iterator[PgBouncer]:
    with psycopg.connect(pg.server.dsn(), autocommit=True) as admin:
        for role in ("app", "scheduler", STATS_USER):
            exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if not exists:
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT ALL ON DATABASE {} TO app, scheduler").format(
                sql.Identifier(pg.database)
            )
        )
    with PgBouncer(pg.server, pool_mode="transaction", pool_size=2) as running:
        yield running


class Watcher:
    """Samples the server and the pooler the way a target with a pgbouncer does."""

    def __init__(self, pg: PgDatabase, bouncer: PgBouncer) -> None:
        self.locks = PgLockSampler(pg.monitor_dsn)
        self.pooler = PgBouncerSampler(bouncer.admin_dsn())
        self.tracker = HoldTracker(continuity_gap=30)

    def findings(self, settings: LockSettings | None = None) -> list[Finding]:
        raw = self.locks.sample()
        now = datetime.now(UTC)
        pool = self.pooler.sample(SampleContext(now, None))
        locks = self.tracker.observe(raw.locks, raw.backends, now)
        snapshot = LockSnapshot("main", now, raw.server_version, locks, raw.backends)
        return detect_locks(snapshot, settings or LockSettings(), now, pool)

    def close(self) -> None:
        self.locks.close()
        self.pooler.close()


@pytest.fixture
def watcher(pg: PgDatabase, bouncer: PgBouncer) -> Iterator[Watcher]:
    watching = Watcher(pg, bouncer)
    yield watching
    watching.close()


def scheduler(dsn: str, name: str, conns: list[psycopg.Connection[Any]]) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, application_name=name)
    conns.append(conn)
    return conn


def try_lead(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(42)").fetchone()
    return bool(row and row[0])


def pooled(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.kind is FindingKind.LOCK_POOLED_SESSION]


def test_two_schedulers_both_lead_through_transaction_pooling_and_lockwatch_says_why(
    pg: PgDatabase, bouncer: PgBouncer, watcher: Watcher
) -> None:
    conns: list[psycopg.Connection[Any]] = []
    try:
        app1 = scheduler(bouncer.dsn(pg.database, user="scheduler"), "app-1", conns)
        app2 = scheduler(bouncer.dsn(pg.database, user="scheduler"), "app-2", conns)
        assert try_lead(app1)
        assert try_lead(app2), "the seed's bug: the second scheduler wins too"

        (finding,) = pooled(watcher.findings())
        assert finding.subject.database == pg.database
        assert pgbouncer_facts(finding)[0].pool_mode == "transaction"
        assert pgbouncer_facts(finding)[0].user == "scheduler"
        backend_pid = pgbouncer_facts(finding)[1].backend_pid
        assert backend_pid in {h.pid for h in evidence_as(finding, LockEvidence).holders}
        assert "belongs to no client" in finding.summary
    finally:
        for conn in conns:
            conn.close()


def test_the_lock_of_a_client_long_gone_is_found_while_others_keep_the_backend_busy(
    pg: PgDatabase, bouncer: PgBouncer, watcher: Watcher
) -> None:
    conns: list[psycopg.Connection[Any]] = []
    try:
        gone = scheduler(bouncer.dsn(pg.database, user="app"), "retry-sweep", conns)
        assert try_lead(gone)
        gone.close()
        busy = scheduler(bouncer.dsn(pg.database, user="app"), "web", conns)
        for _ in range(5):
            busy.execute("SELECT 1")  # the holder's backend keeps serving others: never idle long

        (finding,) = pooled(watcher.findings())
        assert object_json(pgbouncer_facts(finding)[0]) == {
            "database": pg.database,
            "user": "app",
            "pool_mode": "transaction",
        }
        assert pgbouncer_facts(finding)[1].state in {
            "used",
            "idle",
            "active",
        }
    finally:
        for conn in conns:
            conn.close()


def test_the_fix_a_direct_dsn_gives_one_leader_and_no_finding(
    pg: PgDatabase, bouncer: PgBouncer, watcher: Watcher
) -> None:
    conns: list[psycopg.Connection[Any]] = []
    try:
        app1 = scheduler(pg.admin_dsn, "app-1", conns)
        app2 = scheduler(pg.admin_dsn, "app-2", conns)
        assert try_lead(app1)
        assert not try_lead(app2)
        assert pooled(watcher.findings()) == []
    finally:
        for conn in conns:
            conn.close()


def backend_application(pg: PgDatabase, pid: int) -> str | None:
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return row[0] if row else None


def apscheduler_nightly_run(dsn: str) -> int:
    """Seed 000's nightly job as each app server ran it: APScheduler fires it,
    it takes the leader lock with pg_try_advisory_lock on a psycopg2
    connection in autocommit, and exits without unlocking. The backend pid
    that took it."""
    outcome: queue.Queue[int | BaseException] = queue.Queue()

    def nightly() -> None:
        try:
            conn = psycopg2.connect(dsn, application_name="scheduler-host1")
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(42), pg_backend_pid()")
                row = cursor.fetchone()
            conn.close()  # pgbouncer keeps the backend, lock and all
            assert row is not None and row[0], "not a leader"
            outcome.put(int(row[1]))
        except BaseException as exc:  # APScheduler would only log it
            outcome.put(exc)

    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(nightly, "date", run_date=datetime.now(UTC))
    scheduler.start()
    try:
        result = outcome.get(timeout=30)
    finally:
        scheduler.shutdown(wait=True)
    if isinstance(result, BaseException):
        raise result
    return result


def test_a_lock_left_on_a_pooled_backend_is_never_put_on_its_later_clients(
    pg: PgDatabase, bouncer: PgBouncer, watcher: Watcher
) -> None:
    """Seed 000 through pgbouncer: the leader lock left on a backend by the
    APScheduler job, then a web worker and lockwatch doctor itself passing
    through that backend. Neither is named its holder, nor judged as one."""
    settings = LockSettings(
        named=(
            NamedLock(
                "nightly-leader",
                LockKey.parse("42"),
                role=LockRole.LEADER,
                allowed=AllowedHolders(applications=("scheduler-*",)),
            ),
        )
    )
    dsn = bouncer.dsn(pg.database, user="scheduler")
    holder_pid = apscheduler_nightly_run(dsn)
    web = psycopg2.connect(dsn, application_name="web-worker")
    web.autocommit = True
    try:
        with web.cursor() as cursor:
            for _ in range(3):
                cursor.execute("SELECT 1")
    finally:
        web.close()
    later = ["web-worker"]
    doctor = CliRunner().invoke(main, ["doctor", "--dsn", dsn])
    assert doctor.exit_code == 1, doctor.output  # it says POOLED
    later.append("lockwatch-doctor")
    # The backend now bears the name of one of its later clients: the trap.
    assert backend_application(pg, holder_pid) in later

    findings = watcher.findings(settings)
    assert [f.kind for f in findings] == [FindingKind.LOCK_POOLED_SESSION]
    (finding,) = findings
    evidence = evidence_as(finding, LockEvidence)
    (holder,) = evidence.holders
    assert holder.pid == evidence.holder_pid == holder_pid
    assert holder.application_name is None and holder.query is None
    assert holder.pooled is not None and holder.pooled.pool == f"{pg.database}/scheduler"
    assert holder.pooled.last_client_application_name in later
    assert "the client that took the lock is unknown" in holder.pooled.note
    assert not any(name in finding.summary for name in later), finding.summary


def test_a_pooler_without_its_console_is_inferred_from_a_name_that_changes_under_a_lock(
    pg: PgDatabase, bouncer: PgBouncer
) -> None:
    """As behind Supavisor or RDS Proxy: no SHOW SERVERS to join, only what
    PostgreSQL shows. The backend holding the lock takes the name of each
    client pgbouncer hands it to."""
    runner = TargetRunner(
        Target("main", pg.monitor_dsn, locks=LockSettings(orphan_after=3600.0)),
        Board(),
        StateStore(None),
    )
    dsn = bouncer.dsn(pg.database, user="scheduler")
    conns: list[psycopg.Connection[Any]] = []
    try:
        leader = scheduler(dsn, "scheduler-host1", conns)
        assert try_lead(leader)
        leader.close()
        first = runner.poll_once()
        assert pooled(list(first.findings)) == [], "one name seen: nothing to infer yet"
        web = scheduler(dsn, "web-worker", conns)
        web.execute("SELECT 1")  # pgbouncer gives the web worker that backend, and its name
        (finding,) = pooled(list(runner.poll_once().findings))
    finally:
        runner.close()
        for conn in conns:
            conn.close()
    evidence = evidence_as(finding, PooledLockEvidence)
    assert evidence.pool is None and evidence.server_connection is None
    assert evidence.inferred == (
        "its application_name changed from 'scheduler-host1' to 'web-worker' "
        "while it held a session lock"
    )
    (holder,) = evidence.holders
    assert holder.pooled is not None and holder.pooled.inferred
    assert holder.pooled.last_client_application_name == "web-worker"
    assert "a pooler's (inferred:" in finding.summary


def test_doctor_says_pooled_for_the_pgbouncer_dsn_and_safe_for_the_direct_one(
    pg: PgDatabase, bouncer: PgBouncer
) -> None:
    pooled = CliRunner().invoke(main, ["doctor", "--dsn", bouncer.dsn(pg.database, user="app")])
    assert pooled.exit_code == 1, pooled.output
    assert "POOLED" in pooled.output
    assert "session advisory locks" in pooled.output

    direct = CliRunner().invoke(main, ["doctor", "--monitoring", "--dsn", pg.monitor_dsn])
    assert direct.exit_code == 0, direct.output
    assert "SAFE for session state" in direct.output
    assert "role has pg_monitor yes" in direct.output
    assert MONITOR_PASSWORD not in direct.output


def test_doctor_says_a_busy_pool_keeps_an_orphan_until_pgbouncer_retires_its_backend(
    pg: PgDatabase, bouncer: PgBouncer
) -> None:
    with psycopg.connect(
        bouncer.admin_dsn(), autocommit=True, cursor_factory=psycopg.ClientCursor
    ) as admin:
        config = {str(row[0]): str(row[1]) for row in admin.execute("SHOW CONFIG").fetchall()}
    lifetime = format_duration(float(config["server_lifetime"]))
    quiet = format_duration(float(config["server_idle_timeout"]))
    dsn = bouncer.dsn(pg.database, user="app")

    told = CliRunner().invoke(main, ["doctor", "--dsn", dsn, "--pgbouncer", bouncer.admin_dsn()])
    assert told.exit_code == 1, told.output
    assert (
        f"orphan lifetime     idle: up to {lifetime}, ended by pgbouncer's server_lifetime "
        f"(on a quiet pool sooner: server_idle_timeout {quiet});"
    ) in told.output
    untold = CliRunner().invoke(main, ["doctor", "--dsn", dsn])
    assert "orphan lifetime     idle: the pooler, when it retires" in untold.output


def test_doctor_exits_2_when_the_dsn_does_not_work(pg: PgDatabase) -> None:
    broken = CliRunner().invoke(
        main, ["doctor", "--dsn", f"postgresql://x:{MONITOR_PASSWORD}@127.0.0.1:1/{pg.database}"]
    )
    assert broken.exit_code == 2
    assert MONITOR_PASSWORD not in broken.output + broken.stderr
