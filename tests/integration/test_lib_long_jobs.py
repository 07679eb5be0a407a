"""``queue_job_too_long`` with the real pg-boss 12 from npm (and procrastinate
3 from PyPI, at a configured budget): a pg-boss worker that
runs its queue's jobs in 50 ms, then a job whose handler never returns while
its worker lives. The budget is learned from pg-boss's own rows of the
task's successful runs (3 x p99, with a 2 s floor here; 60 s by default).
Ground truth: pg-boss's job row (active since its start, expiring at
``started_on + expire_seconds``), its instance's sessions in
``pg_stat_activity`` and the worker's own word of the job it runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lockwatch.model.evidence import LongJobsEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import grant_schema, library_queue
from tests.integration.test_lib_pg_boss import QUEUE, Boss, boss, pg, server
from tests.integration.test_lib_procrastinate import QUEUE as PROCRASTINATE_QUEUE
from tests.integration.test_lib_procrastinate import Worker as ProcrastinateWorker
from tests.integration.test_lib_procrastinate import defer, install

__all__ = ["boss", "pg", "server"]  # test_lib_pg_boss's fixtures, used here

pytestmark = pytest.mark.pg

POLL = 0.5
FLOOR = 2.0  # job_duration_floor: the learned budget of 50 ms jobs
HISTORY = 12  # successful runs before the hung one (10 are enough to learn)


def watching(pg: PgDatabase) -> TargetRunner:
    grant_schema(pg, "pgboss")
    queue = library_queue("pg-boss", QUEUE)
    short = replace(queue, thresholds=replace(queue.thresholds, job_duration_floor=FLOOR))
    target = Target("main", pg.monitor_dsn, interval=POLL, queues=(short,))
    return TargetRunner(target, Board(), StateStore(None))


def too_long(runner: TargetRunner) -> Finding | None:
    view = runner.poll_once()
    return next((f for f in view.findings if f.kind is FindingKind.QUEUE_JOB_TOO_LONG), None)


def test_a_hung_handler_is_found_at_its_tasks_learned_budget(pg: PgDatabase, boss: Boss) -> None:
    worker, _ = boss.start_together(("worker", ""), ("producer", str(HISTORY)))
    runner = watching(pg)
    try:

        def learned() -> bool:
            assert too_long(runner) is None  # 50 ms jobs are never too long
            return worker.count("completed") >= HISTORY

        wait_until(learned, timeout=60, interval=POLL, message="the task's history")
        sender = boss.start("producer", "hang")
        job = next(line for line in sender.lines if line.startswith("sent ")).removeprefix("sent ")
        wait_until(lambda: f"running {job}" in worker.lines, timeout=60, message="its handler")
        db = pg.connect()
        (started_on, deadline) = db.execute(
            "SELECT started_on, started_on + expire_seconds * interval '1 second'"
            " FROM pgboss.job WHERE id = %s AND state = 'active'",
            (job,),
        ).fetchone() or (None, None)
        assert started_on is not None
        finding = wait_until(lambda: too_long(runner), timeout=60, interval=POLL, message=job)
        # collected for docs/benchmarks.md: from the job's start, by pg-boss's clock
        (late,) = db.execute("SELECT now() - %s::timestamptz", (started_on,)).fetchone() or (None,)
        print(f"detection pg-boss-12.38.0 hung handler: {late} after its start (budget {FLOOR}s)")
        evidence = evidence_as(finding, LongJobsEvidence)
        [facts] = evidence.jobs
        assert (facts.job_id, facts.task, facts.started_at) == (job, QUEUE, started_on)
        assert facts.budget_seconds == FLOOR
        assert facts.budget_from.endswith(f"over {worker.count('completed')} runs")
        assert facts.running_seconds > FLOOR
        assert facts.library_deadline == deadline
        assert "pg-boss expires it" in (facts.library_action or "")
        # Its worker is the instance that runs it, with its own sessions.
        [instance] = facts.workers
        assert f"pid {worker.process.pid}" in instance
        pids = {
            row[0]
            for row in db.execute(
                "SELECT a.pid FROM pg_stat_activity AS a JOIN pgboss.instance AS i"
                " ON a.application_name = i.application_name WHERE i.pid = %s",
                (worker.process.pid,),
            )
        }
        assert set(facts.sessions) == pids and pids
        assert f"job {job} ({QUEUE}) running for" in finding.summary
        # lockwatch_queue_job_longest_running_seconds' value: the hung job's run so far.
        (queue_view,) = [q for q in runner.poll_once().queues if q.name == QUEUE]
        assert (queue_view.longest_job_seconds or 0) >= facts.running_seconds
        assert db.execute("SELECT state FROM pgboss.job WHERE id = %s", (job,)).fetchone() == (
            "active",
        )
    finally:
        runner.close()


def test_a_procrastinate_job_past_its_queues_budget_is_named_with_its_worker(
    pg: PgDatabase,
) -> None:
    install(pg)
    worker = ProcrastinateWorker(pg)
    try:
        wait_until(worker.started, timeout=60, message=f"{worker.lines}")
        defer(pg, 1)
        job = worker.job()
        queue = library_queue("procrastinate", PROCRASTINATE_QUEUE)
        budget = replace(queue.thresholds, max_job_duration=FLOOR)
        target = Target(
            "main", pg.monitor_dsn, interval=POLL, queues=(replace(queue, thresholds=budget),)
        )
        runner = TargetRunner(target, Board(), StateStore(None))
        try:
            finding = wait_until(lambda: too_long(runner), timeout=60, interval=POLL, message=job)
        finally:
            runner.close()
        [facts] = evidence_as(finding, LongJobsEvidence).jobs
        # collected for docs/benchmarks.md: from the job's start, by its own 'started' event
        (late,) = pg.connect().execute(
            "SELECT now() - max(at) FROM procrastinate_events WHERE job_id = %s AND type = 'started'",
            (int(job),),
        ).fetchone() or (None,)
        print(f"detection procrastinate-3.10.0 hung task: {late} after its start (budget {FLOOR}s)")
        # procrastinate's own rows: the job doing, taken by its worker.
        (status, worker_id) = pg.connect().execute(
            "SELECT status::text, worker_id FROM procrastinate_jobs WHERE id = %s", (int(job),)
        ).fetchone() or (None, None)
        assert status == "doing"
        assert (facts.job_id, facts.task, facts.workers) == (job, "hang", (f"worker {worker_id}",))
        assert facts.budget_from == "max_job_duration" and facts.library_deadline is None
        assert facts.library_action == "procrastinate never ends it by itself"
    finally:
        worker.stop()
