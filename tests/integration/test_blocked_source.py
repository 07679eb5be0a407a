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
from lockwatch.model.views import TargetView
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import grant_schema, library_queue
from tests.integration.test_lib_pg_boss import QUEUE, Boss, boss, pg, server

__all__ = ["boss", "pg", "server"]  # test_lib_pg_boss's fixtures, used here

pytestmark = pytest.mark.pg

# The migration's session sits idle in its transaction while pg-boss waits.
BLOCKER = FindingKind.IDLE_IN_TRANSACTION_BLOCKER


def test_a_source_blocked_by_an_incidents_root_joins_that_incident(
    pg: PgDatabase, boss: Boss
) -> None:
    worker = boss.start("worker")
    boss.start("producer", "3")
    wait_until(lambda: worker.count("completed") >= 3, timeout=60, message="pg-boss works")
    grant_schema(pg, "pgboss")
    queue = library_queue("pg-boss", QUEUE)
    locks = LockSettings(idle_blocker_wait=1.0)
    target = Target("main", pg.monitor_dsn, interval=0.5, queues=(queue,), locks=locks)
    runner = TargetRunner(target, Board(), StateStore(None))
    deploy = pg.connect("deploy-migration")
    try:
        deploy.execute("BEGIN")
        deploy.execute("LOCK TABLE pgboss.job IN ACCESS EXCLUSIVE MODE")
        locked = time.monotonic()
        holder = deploy.info.backend_pid
        admin = pg.connect()
        assert admin.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND mode = 'AccessExclusiveLock'"
            " AND relation = 'pgboss.job'::regclass AND granted",
            (holder,),
        ).fetchone() == (1,)

        def joined() -> TargetView | None:
            view = runner.poll_once()
            down = [f for f in view.findings if f.kind is FindingKind.TARGET_DOWN]
            blocking = [f for f in view.findings if f.kind is BLOCKER]
            return view if down and blocking else None

        view = wait_until(joined, timeout=60, message="the queue blocked, the source down")
        # collected for docs/benchmarks.md
        print(f"detection pg-boss-12.38.0 source blocked: joined {time.monotonic() - locked:.1f}s")
    finally:
        runner.close()
        deploy.close()
    (down,) = [f for f in view.findings if f.kind is FindingKind.TARGET_DOWN]
    evidence = evidence_as(down, SourceDownEvidence)
    (blocker,) = evidence.blocked_by
    assert (blocker.pid, blocker.mode, blocker.relation) == (
        holder,
        "AccessExclusiveLock",
        "pgboss.job",
    )
    assert blocker.application_name == "deploy-migration"
    assert f"blocked by pid {holder} (deploy-migration) holding AccessExclusiveLock" in down.summary
    # One incident: the holding session's, with both the wait it makes and the source.
    (incident,) = [i for i in view.incidents if i.root.pid == holder]
    assert incident.root.kind is RootKind.SESSION
    assert {BLOCKER, FindingKind.TARGET_DOWN} <= set(incident.kinds)
    assert not [i for i in view.incidents if i.root.kind is RootKind.TARGET]
