"""One root cause, one incident (issue 25 item 6): a session holding pg-boss's
job table ACCESS EXCLUSIVE queues the real pg-boss worker's statements behind
it and times out the pg-boss preset's own query; the preset's target_down
names that session and joins its incident, not one of its own. Ground truth:
a superuser's look at pg_locks."""

from __future__ import annotations

import time

import pytest

from lockwatch.model.evidence import SourceDownEvidence
from lockwatch.model.findings import FindingKind
from lockwatch.model.incidents import RootKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import (
    Workers,
    grant_schema,
    library_queue,
    url,
    workers,
)
from tests.integration.test_lib_pg_boss import QUEUE, Boss, boss, pg, server

__all__ = ["boss", "pg", "server", "workers"]  # other files' fixtures, used here

pytestmark = pytest.mark.pg

# The migration's session sits idle in its transaction while pg-boss waits.
BLOCKER = FindingKind.IDLE_IN_TRANSACTION_BLOCKER


def test_a_source_blocked_by_an_incidents_root_joins_that_incident(
    pg: PgDatabase, boss: Boss
) -> None:
    """pg-boss 12.38 (its latest release): a migration holds its job table."""
    worker = boss.start("worker")
    boss.start("producer", "3")
    wait_until(lambda: worker.count("completed") >= 3, timeout=60, message="pg-boss works")
    joins_the_holders_incident(pg, QUEUE, "pgboss.job", "12.38.0")


def test_pg_boss_10s_archive_held_joins_the_maintenance_convoys_incident(
    pg: PgDatabase, workers: Workers
) -> None:
    """pg-boss 10.4.2 (its oldest supported release), as the issue saw it: a
    session holding pgboss.archive stalls pg-boss's maintenance and times out
    the preset's own query, one root cause."""
    worker = workers.start("pg_boss_worker.js", url(pg), "reports")
    wait_until(lambda: worker.count("maintenance") >= 2, timeout=60, message="pg-boss maintains")
    joins_the_holders_incident(pg, "reports", "pgboss.archive", "10.4.2")


def joins_the_holders_incident(pg: PgDatabase, queue_name: str, table: str, release: str) -> None:
    grant_schema(pg, "pgboss")
    queue = library_queue("pg-boss", queue_name)
    locks = LockSettings(idle_blocker_wait=1.0)
    target = Target("main", pg.monitor_dsn, interval=0.5, queues=(queue,), locks=locks)
    runner = TargetRunner(target, Board(), StateStore(None))
    deploy = pg.connect("deploy-migration")
    try:
        deploy.execute("BEGIN")
        deploy.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        locked = time.monotonic()
        holder = deploy.info.backend_pid
        admin = pg.connect()
        assert admin.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND mode = 'AccessExclusiveLock'"
            " AND relation = %s::regclass AND granted",
            (holder, table),
        ).fetchone() == (1,)

        def joined() -> TargetView | None:
            view = runner.poll_once()
            down = [f for f in view.findings if f.kind is FindingKind.TARGET_DOWN]
            blocking = [f for f in view.findings if f.kind is BLOCKER]
            return view if down and blocking else None

        view = wait_until(joined, timeout=60, message="the queue blocked, the source down")
        # collected for docs/benchmarks.md
        print(
            f"detection pg-boss-{release} source blocked: joined {time.monotonic() - locked:.1f}s"
        )
    finally:
        runner.close()
        deploy.close()
    (down,) = [f for f in view.findings if f.kind is FindingKind.TARGET_DOWN]
    evidence = evidence_as(down, SourceDownEvidence)
    (blocker,) = evidence.blocked_by
    assert (blocker.pid, blocker.mode, blocker.relation) == (
        holder,
        "AccessExclusiveLock",
        table,
    )
    assert blocker.application_name == "deploy-migration"
    assert f"blocked by pid {holder} (deploy-migration) holding AccessExclusiveLock" in down.summary
    # One incident: the holding session's, with both the wait it makes and the source.
    (incident,) = [i for i in view.incidents if i.root.pid == holder]
    assert incident.root.kind is RootKind.SESSION
    assert {BLOCKER, FindingKind.TARGET_DOWN} <= set(incident.kinds)
    assert not [i for i in view.incidents if i.root.kind is RootKind.TARGET]
