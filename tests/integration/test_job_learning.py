"""A job's learned duration and its failures in a row (issue 14, part 3), read
from the application's own table of runs on a real server: a run far longer
than the job's successful ones is job_too_long with no limit configured, and
job_failed waits for failures_before_alert failed runs in a row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql

from lockwatch.model.findings import Family, Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.fields import Learned
from lockwatch.settings.jobs import JobSpec, RunLearning
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.postgres import PgDatabase

pytestmark = [pytest.mark.pg, pytest.mark.slow]

QUERY = "SELECT started_at, finished_at, status, host FROM sync_runs WHERE started_at >= %(since)s"


@pytest.fixture
def runs_table(pg: PgDatabase) -> PgDatabase:
    with psycopg.connect(pg.admin_dsn, autocommit=True) as admin:
        admin.execute(
            "CREATE TABLE sync_runs (started_at timestamptz, finished_at timestamptz,"
            " status text, host text)"
        )
        admin.execute(
            sql.SQL("GRANT SELECT ON sync_runs TO {}").format(sql.Identifier(pg.monitor_user))
        )
    return pg


def record(pg: PgDatabase, *runs: tuple[float, float | None, str]) -> None:
    """Runs that started ``minutes`` ago and took ``seconds`` (None: still running)."""
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        for minutes, seconds, status in runs:
            conn.execute(
                "INSERT INTO sync_runs SELECT start, start + make_interval(secs => %s), %s, 'app-1'"
                " FROM (SELECT now() - make_interval(secs => %s) AS start) AS run",
                (seconds, status, minutes * 60),
            )


def findings(pg: PgDatabase, job: JobSpec) -> list[Finding]:
    runner = TargetRunner(
        Target("main", pg.monitor_dsn, interval=0.5),
        Board(),
        StateStore(None),
        lambda: datetime.now(UTC),
        jobs=(job,),
    )
    try:
        view = runner.poll_once()
    finally:
        runner.close()
    assert view.up, view.status
    return [f for f in view.findings if f.kind.family is Family.JOBS]


def test_a_run_far_longer_than_the_jobs_usual_runs_is_too_long(runs_table: PgDatabase) -> None:
    job = JobSpec(
        "sync",
        target="main",
        query=QUERY,
        max_duration=Learned.AUTO,
        learning=RunLearning(min_runs=10, factor=3.0, floor=60.0),
    )
    record(runs_table, *[(30.0 + 10 * n, 40.0 + n, "success") for n in range(12)])
    record(runs_table, (1.5, None, "running"))  # 90 s: within 3 x p99 (~51 s)
    assert findings(runs_table, job) == []

    with psycopg.connect(runs_table.admin_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE sync_runs SET finished_at = now(), status = 'success' WHERE finished_at IS NULL"
        )
    record(runs_table, (20.0, None, "running"))  # 20 minutes
    (finding,) = findings(runs_table, job)
    assert finding.kind is FindingKind.JOB_TOO_LONG
    # 3 x the p99 of 40..51 s and the 90 s run that finished since: 3 x 51 s
    assert "learned 2m33s (usually 46s, p99 51s over 13 runs)" in finding.summary


def test_job_failed_waits_for_three_failures_in_a_row(runs_table: PgDatabase) -> None:
    job = JobSpec("sync", target="main", query=QUERY, failures_before_alert=3)
    record(runs_table, (50.0, 5.0, "success"), (40.0, 5.0, "fail"), (30.0, 5.0, "fail"))
    assert findings(runs_table, job) == []
    record(runs_table, (20.0, 5.0, "fail"))
    (finding,) = findings(runs_table, job)
    assert finding.kind is FindingKind.JOB_FAILED
    assert finding.summary == "the last 3 runs of job sync failed, the last on app-1"
    assert finding.since < datetime.now(UTC) - timedelta(minutes=39)
