"""graphile-worker from npm, its oldest supported release (0.16.6) and its
latest (0.18.0) (issue 25 item 3, in part): a healthy worker with zero
findings; a worker killed mid-job and replaced a few seconds later, within
the 10 s the preset used to allow a worker's listener to connect. The job stays locked by the dead worker
(graphile-worker takes it again only after 4 hours), and job_stuck_running
keeps saying so while the replacement works. Ground truth: graphile-worker's
own job row (locked_by, locked_at) and the workers' own output."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime

import pytest

from lockwatch.model.evidence import LongJobsEvidence, StuckJobsEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import (
    NodeWorker,
    Workers,
    grant_graphile_worker,
    library_queue,
    poll_quietly,
    queue_latest,
    url,
    workers,
)
from tests.integration.test_lib_pg_boss import NODE_22

__all__ = ["workers"]  # test_catalogue_libraries' fixture, used here

pytestmark = pytest.mark.pg

QUEUE = "reports"
SLACK = 2.0  # the preset's: a listener that connected this long after the lock is not its worker's
POLL = 0.5  # the runner's interval: a finding is due within one poll of its cause


# Each release: its package in .npm-libraries, the Node.js that runs it, its
# last migration (graphile_worker.migrations).
RELEASES = {
    "0.16.6": ({"GRAPHILE_WORKER_PACKAGE": "graphile-worker"}, "node", 18),
    "0.18.0": ({"GRAPHILE_WORKER_PACKAGE": "graphile-worker-latest"}, str(NODE_22), 20),
}


def start(
    workers: Workers,
    pg: PgDatabase,
    release: str,
    *mode: str,
    concurrency: int = 2,
    processes: int = 1,
) -> list[NodeWorker]:
    """``processes`` worker processes of ``release``: the first installs the
    schema, the others then start at once (0.16.6 processes installing it
    together race on its CREATE SCHEMA IF NOT EXISTS, the losers exiting
    with a duplicate key error)."""
    release_env, node, _ = RELEASES[release]
    env = {**release_env, "GRAPHILE_WORKER_CONCURRENCY": str(concurrency)}
    args = ("graphile_worker.js", url(pg), QUEUE, *mode)
    first = workers.start(*args, env=env, node=node)
    return [first, *workers.start_together(processes - 1, *args, env=env, node=node)]


def runner_for(pg: PgDatabase, max_job_duration: float | None = None) -> TargetRunner:
    queue = library_queue("graphile-worker", QUEUE)
    if max_job_duration is not None:
        budget = replace(queue.thresholds, max_job_duration=max_job_duration)
        queue = replace(queue, thresholds=budget)
    return TargetRunner(
        Target("main", pg.monitor_dsn, interval=POLL, queues=(queue,)), Board(), StateStore(None)
    )


def running(worker: NodeWorker) -> str:
    """The id of the job the worker says it runs (its own word)."""
    return wait_until(
        lambda: next((x for x in list(worker.lines) if x.startswith("running ")), None),
        timeout=60,
        message=f"the job running: {worker.lines}",
    ).removeprefix("running ")


@pytest.mark.parametrize("release", RELEASES)
def test_a_healthy_worker_gives_zero_findings(
    pg: PgDatabase, workers: Workers, release: str
) -> None:
    [worker] = start(workers, pg, release)
    grant_graphile_worker(pg)
    (migration,) = pg.connect().execute(
        "SELECT max(id) FROM graphile_worker.migrations"
    ).fetchone() or (None,)
    assert migration == RELEASES[release][2]
    runner = runner_for(pg)
    try:
        done = worker.count("completed") + 10
        view = poll_quietly(
            runner,
            lambda v: queue_latest(v) is not None and worker.count("completed") >= done,
            f"ten more jobs run: {worker.lines[-5:]}",
        )
        assert queue_latest(view).consumers == 1  # its one listening session
    finally:
        runner.close()


def stuck(runner: TargetRunner) -> Finding | None:
    view = runner.poll_once()
    return next((f for f in view.findings if f.kind is FindingKind.JOB_STUCK_RUNNING), None)


@pytest.mark.parametrize("release", RELEASES)
def test_a_replacement_worker_does_not_hide_the_job_its_predecessor_left_locked(
    pg: PgDatabase, workers: Workers, release: str
) -> None:
    [first] = start(workers, pg, release, "hang")
    job_id = running(first)
    grant_graphile_worker(pg)
    admin = pg.connect()

    def lock() -> tuple[str, datetime, float]:
        row = admin.execute(
            "SELECT locked_by, locked_at, EXTRACT(epoch FROM now() - locked_at)::float8"
            " FROM graphile_worker._private_jobs WHERE id = %s",
            (int(job_id),),
        ).fetchone()
        assert row is not None and row[0] is not None, "the job is locked"
        return str(row[0]), row[1], float(row[2])

    # Killed once its lock is older than the slack; replaced at once, within
    # the 10 s that hid the job before.
    wait_until(lambda: lock()[2] > SLACK, message="the lock older than the slack")
    locked_by, locked_at, _ = lock()
    killed = time.monotonic()
    first.kill()
    [second] = start(workers, pg, release)
    assert lock()[2] < 10.0, "replaced within the old slack"
    runner = runner_for(pg)
    try:
        finding = wait_until(lambda: stuck(runner), timeout=30, message="the stuck job reported")
        # collected for docs/benchmarks.md (the runner starts after the replacement)
        print(f"detection graphile-worker-{release} replaced: {time.monotonic() - killed:.1f}s")
        for _ in range(5):  # the replacement works on: the job stays its dead predecessor's
            again = stuck(runner)
            assert again is not None
            assert evidence_as(again, StuckJobsEvidence).job_ids == (job_id,)
    finally:
        runner.close()
    evidence = evidence_as(finding, StuckJobsEvidence)
    assert evidence.job_ids == (job_id,) and evidence.stuck_count == 1
    assert lock()[:2] == (locked_by, locked_at), "still locked by the dead worker"
    # The replacement works (its own word) while the job stays the dead one's.
    wait_until(lambda: second.count("completed") > 0, message="the replacement runs jobs")
    assert lock()[:2] == (locked_by, locked_at)


def finding_of(view: TargetView, kind: FindingKind) -> Finding | None:
    return next((f for f in view.findings if f.kind is kind), None)


def one_job_each(workers: Workers, pg: PgDatabase, release: str) -> list[tuple[NodeWorker, str]]:
    """Three worker processes of one worker each, each adding one job that
    never returns and running one of the three (a worker runs one job at a
    time), locked by three different worker ids (graphile-worker's own rows)."""
    started = [
        (worker, running(worker))
        for worker in start(workers, pg, release, "hang", concurrency=1, processes=3)
    ]
    grant_graphile_worker(pg)
    rows = pg.connect().execute(
        "SELECT id::text, locked_by FROM graphile_worker._private_jobs WHERE locked_by IS NOT NULL"
    )
    locked = dict(rows.fetchall())
    assert set(locked) == {job for _, job in started} and len(set(locked.values())) == 3
    return started


def still_locked(pg: PgDatabase) -> int:
    """graphile-worker's own word: the jobs it keeps locked."""
    rows = pg.connect().execute(
        "SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_by IS NOT NULL"
    )
    return int(rows.fetchone()[0])  # type: ignore[index]


def test_three_healthy_worker_processes_give_zero_findings(
    pg: PgDatabase, workers: Workers
) -> None:
    # The baseline of the count below: every pool holding jobs listens.
    started = start(workers, pg, "0.18.0", processes=3)
    grant_graphile_worker(pg)
    runner = runner_for(pg)
    try:
        done = sum(w.count("completed") for w in started) + 30
        view = poll_quietly(
            runner,
            lambda v: (
                queue_latest(v) is not None and sum(w.count("completed") for w in started) >= done
            ),
            f"thirty more jobs run: {[w.lines[-2:] for w in started]}",
        )
        assert queue_latest(view).consumers == 3  # a listening session per process
    finally:
        runner.close()


def test_one_of_three_worker_pools_killed_mid_job_is_counted(
    pg: PgDatabase, workers: Workers
) -> None:
    # 0.17 on: a job is locked by its process's worker pool, one pool and one
    # listening session per process; three pools hold jobs, two listen.
    started = one_job_each(workers, pg, "0.18.0")
    runner = runner_for(pg)
    try:
        assert finding_of(runner.poll_once(), FindingKind.JOB_STUCK_RUNNING) is None
        dead, _ = started[1]
        dead.kill()
        killed = time.monotonic()
        finding = wait_until(
            lambda: finding_of(runner.poll_once(), FindingKind.JOB_STUCK_RUNNING),
            timeout=30,
            interval=POLL,
            message="the dead pool's job counted",
        )
        print(
            f"detection graphile-worker-0.18.0 one of three killed: {time.monotonic() - killed:.1f}s"
        )
    finally:
        runner.close()
    evidence = evidence_as(finding, StuckJobsEvidence)
    assert (evidence.stuck_count, evidence.job_ids) == (1, ())
    assert "counted, not named" in finding.summary
    assert still_locked(pg) == 3  # the dead one's job too, for 4 hours
    assert all(w.process.poll() is None for w, _ in (started[0], started[2]))


def test_one_of_three_0_16_workers_killed_mid_job_is_told_by_its_duration_alone(
    pg: PgDatabase, workers: Workers
) -> None:
    # 0.16: a process runs several worker ids under one listener, so no count
    # tells a dead one; the job is told once it runs past max_job_duration,
    # in words that say its worker's liveness cannot be told.
    # A budget the jobs pass soon after the kill; no poll may tell one stuck.
    budget = 2.0
    started = one_job_each(workers, pg, "0.16.6")
    runner = runner_for(pg, max_job_duration=budget)
    try:
        dead, job = started[1]
        dead.kill()

        def too_long() -> Finding | None:
            view = runner.poll_once()
            assert finding_of(view, FindingKind.JOB_STUCK_RUNNING) is None, "cannot be told"
            found = finding_of(view, FindingKind.QUEUE_JOB_TOO_LONG)
            jobs = () if found is None else evidence_as(found, LongJobsEvidence).jobs
            return found if job in {facts.job_id for facts in jobs} else None

        finding = wait_until(too_long, timeout=60, interval=POLL, message="the job too long")
        (past,) = pg.connect().execute(
            "SELECT EXTRACT(epoch FROM now() - locked_at)::float8"
            " FROM graphile_worker._private_jobs WHERE id = %s",
            (int(job),),
        ).fetchone() or (0.0,)
        late = float(past) - budget
        print(f"detection graphile-worker-0.16.6 one of three killed: budget + {late:.1f}s")
    finally:
        runner.close()
    # Its job and the two live workers' hanging ones alike: none is told apart.
    evidence = evidence_as(finding, LongJobsEvidence)
    assert all(not facts.liveness_told for facts in evidence.jobs)
    assert "whether its worker still lives cannot be told" in finding.summary
    assert still_locked(pg) == 3
