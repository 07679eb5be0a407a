"""The job-library runbooks followed as written (``docs/runbooks.md``), with the
real libraries from npm on Debian's PostgreSQL 15: a graphile-worker and a
pg-boss worker killed mid-job (``job_stuck_running``), and a pg-boss job run
again after its expiry while its first handler runs
(``job_rescued_while_running``), and pg-boss 12's workers all killed while its
producer enqueues (``queue_no_consumer``). Their SQL runs as the roles it names: the
application's (the role the library connects as) for its tables, the on-call
role for the sessions; graphile-worker's unlock ends the finding.

Not run: pg-boss's ``boss.fail``/``boss.retry``/``boss.cancel``, which are
calls in the application's own pg-boss client, not commands."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.queues import QueueThresholds
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.postgres import (
    MONITOR_PASSWORD,
    MONITOR_USER,
    PgDatabase,
    wait_until,
)
from tests.fixtures.runbooks import ONCALL_PASSWORD, Runbook, debian_cluster
from tests.integration.test_catalogue_libraries import (
    NodeWorker,
    Workers,
    grant_graphile_worker,
    grant_schema,
    library_queue,
    url,
)
from tests.integration.test_lib_pg_boss import NODE_22

pytestmark = [pytest.mark.pg, pytest.mark.slow]

STEPS = (
    ("job_stuck_running", "pg-boss-jobs"),
    ("job_stuck_running", "pg-boss-sessions"),
    ("job_stuck_running", "graphile-jobs"),
    ("job_stuck_running", "graphile-sessions"),
    ("job_stuck_running", "graphile-unlock"),
    ("job_rescued_while_running", "pg-boss"),
    ("queue_no_consumer", "pg-boss-instances"),
    ("queue_job_too_long", "pg-boss-job"),
    ("queue_capacity_lost", "pg-boss-completions"),
)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    with debian_cluster() as server:
        server.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield server


@pytest.fixture
def pg(server: LocalCluster) -> Iterator[PgDatabase]:
    with closing(PgDatabase(server)) as database:
        yield database


@pytest.fixture
def book(server: LocalCluster, pg: PgDatabase) -> Runbook:
    oncall = server.dsn(dbname=pg.database, user="oncall", password=ONCALL_PASSWORD)
    # The application's role is the one its library connects as (url()).
    made = Runbook({"superuser": server.dsn(), "oncall": oncall, "app": pg.admin_dsn})
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = 'oncall'").fetchone()
    if not exists:
        made.sql("tools", "oncall-role", password=ONCALL_PASSWORD)
    return made


@pytest.fixture
def workers() -> Iterator[Workers]:
    made = Workers()
    yield made
    for worker in made.started:
        worker.stop()


def watching(pg: PgDatabase, preset: str, queue: str) -> TargetRunner:
    target = Target("main", pg.monitor_dsn, interval=0.2, queues=(library_queue(preset, queue),))
    return TargetRunner(target, Board(), StateStore(None))


def pg_boss_12(workers: Workers, pg: PgDatabase, *args: str) -> NodeWorker:
    """pg-boss's latest release (on the Node.js 22 it needs) on queue "reports"."""
    process = NodeWorker("pg_boss_latest.mjs", url(pg), "reports", *args, node=NODE_22)
    workers.started.append(process)
    wait_until(lambda: process.count("started"), timeout=60, message=f"{process.lines}")
    return process


def watching_short(pg: PgDatabase, thresholds: QueueThresholds) -> TargetRunner:
    """A pg-boss 12 queue watched with shorter thresholds than the defaults."""
    grant_schema(pg, "pgboss")
    short = replace(library_queue("pg-boss", "reports"), thresholds=thresholds)
    target = Target("main", pg.monitor_dsn, interval=0.2, queues=(short,))
    return TargetRunner(target, Board(), StateStore(None))


def of_kind(runner: TargetRunner, kind: FindingKind) -> tuple[Finding, ...]:
    return tuple(f for f in runner.poll_once().findings if f.kind is kind)


def started_job(worker: Any) -> str:
    line = wait_until(
        lambda: next((line for line in worker.lines if line.startswith("running ")), None),
        timeout=60,
        message=f"the job running: {worker.lines}",
    )
    return str(line.split()[1])


def test_a_graphile_worker_killed_mid_job_is_confirmed_and_its_job_given_back(
    pg: PgDatabase, book: Runbook, workers: Workers
) -> None:
    worker = workers.start("graphile_worker.js", url(pg), "emails", "hang")
    job_id = started_job(worker)
    grant_graphile_worker(pg)
    assert book.sql("job_stuck_running", "graphile-sessions"), "its session, while it lives"
    runner = watching(pg, "graphile-worker", "emails")
    try:
        worker.kill()
        wait_until(lambda: of_kind(runner, FindingKind.JOB_STUCK_RUNNING), message="the stuck job")
        ((shown_id, locked_by, _),) = book.sql("job_stuck_running", "graphile-jobs")
        assert str(shown_id) == job_id and locked_by
        assert book.sql("job_stuck_running", "graphile-sessions") == []  # its worker is gone
        book.sql("job_stuck_running", "graphile-unlock", locked_by=locked_by)
        assert book.sql("job_stuck_running", "graphile-jobs") == []
        wait_until(
            lambda: not of_kind(runner, FindingKind.JOB_STUCK_RUNNING),
            message="the job given back",
        )
    finally:
        runner.close()


def test_a_pg_boss_worker_killed_mid_job_is_confirmed_by_its_rows_and_sessions(
    pg: PgDatabase, book: Runbook, workers: Workers
) -> None:
    worker = workers.start("pg_boss_worker.js", url(pg), "reports", "hang")
    job_id = started_job(worker)
    grant_schema(pg, "pgboss")
    assert book.sql("job_stuck_running", "pg-boss-sessions"), "its sessions, while it lives"
    runner = watching(pg, "pg-boss", "reports")
    try:
        worker.kill()
        wait_until(lambda: of_kind(runner, FindingKind.JOB_STUCK_RUNNING), message="the stuck job")
    finally:
        runner.close()
    ((shown_id, name, _),) = book.sql("job_stuck_running", "pg-boss-jobs")
    assert (str(shown_id), name) == (job_id, "reports")
    assert book.sql("job_stuck_running", "pg-boss-sessions") == []


def test_a_pg_boss_job_run_again_after_its_expiry_shows_the_timeout_in_its_row(
    pg: PgDatabase, book: Runbook, workers: Workers
) -> None:
    worker = workers.start("pg_boss_worker.js", url(pg), "reports", "slow")
    grant_schema(pg, "pgboss")
    runner = watching(pg, "pg-boss", "reports")
    try:
        (finding,) = wait_until(
            lambda: of_kind(runner, FindingKind.JOB_RESCUED_WHILE_RUNNING),
            timeout=60,
            interval=0.1,
            message=f"{worker.lines}",
        )
    finally:
        runner.close()
    evidence: Any = finding.evidence
    (job,) = evidence.jobs
    ((shown_id, retries, _, output),) = book.sql(
        "job_rescued_while_running", "pg-boss", id=job.job_id
    )
    assert str(shown_id) == job.job_id and retries >= 1
    # The timeout that caused the retry, in pg-boss's words.
    assert "handler execution exceeded" in output["message"], output


def test_a_pg_boss_queue_whose_workers_are_all_gone_shows_no_instance_working_it(
    pg: PgDatabase, book: Runbook, workers: Workers
) -> None:
    worker = pg_boss_12(workers, pg, "worker")
    pg_boss_12(workers, pg, "producer")
    runner = watching_short(pg, QueueThresholds(window=5.0, no_consumer_after=2.0))
    try:
        wait_until(
            lambda: any(row[5] for row in book.sql("queue_no_consumer", "pg-boss-instances")),
            message="the worker's instance beating with the queue it works",
        )
        worker.kill()
        wait_until(lambda: of_kind(runner, FindingKind.QUEUE_NO_CONSUMER), message="no consumer")
    finally:
        runner.close()
    rows = book.sql("queue_no_consumer", "pg-boss-instances")
    # The killed worker's row, which works the queue, beats no more; the
    # producer's, which beats, works none.
    [dead] = [row for row in rows if row[5]]
    assert dead[2] == worker.process.pid and dead[4] is None
    assert [row for row in rows if not row[5]], "the producer's instance"


def test_a_pg_boss_queue_counts_its_completions_then_shows_a_hanging_handler_with_its_expiry(
    pg: PgDatabase, book: Runbook, workers: Workers
) -> None:
    # One queue with a history for both steps: pg-boss 12 sets up its schema
    # in seconds on a busy machine.
    worker = pg_boss_12(workers, pg, "worker")
    pg_boss_12(workers, pg, "producer", "12")
    runner = watching_short(pg, QueueThresholds(window=5.0, job_duration_floor=1.0))
    try:
        wait_until(lambda: worker.count("completed") >= 12, message="12 jobs completed")
        minutes = book.sql("queue_capacity_lost", "pg-boss-completions", queue="reports")
        # The worker's own word: each of its jobs completed once.
        assert sum(count for _, count in minutes) == worker.count("completed") == 12

        sender = pg_boss_12(workers, pg, "producer", "hang")
        job = next(line for line in sender.lines if line.startswith("sent ")).removeprefix("sent ")
        (finding,) = wait_until(
            lambda: of_kind(runner, FindingKind.QUEUE_JOB_TOO_LONG), timeout=60, message=job
        )
    finally:
        runner.close()
    evidence: Any = finding.evidence
    ((shown_id, name, state, started_on, expires_at),) = book.sql(
        "queue_job_too_long", "pg-boss-job", id=job
    )
    assert (str(shown_id), name, state) == (job, "reports", "active")
    assert evidence.jobs[0].started_at == started_on
    assert evidence.jobs[0].library_deadline == expires_at
