"""procrastinate 3 (from PyPI) run as its users run it, at its oldest
supported release (3.1.0, the first with worker heartbeats, from
.py-libraries/) and its latest (the .venv's): worker processes of their own
beside a web app that only enqueues; one worker killed mid-job while the
others live; every worker killed and one replacement started; a backlog
with the workers stopped. Ground truth is procrastinate's own: its jobs'
worker_id and status, its workers' heartbeats (procrastinate_workers),
never lockwatch."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

import pytest

from lockwatch.model.evidence import StuckJobsEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.queues import QueueThresholds, SqlQueueSource
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import MONITOR_USER, PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import library_queue
from tests.integration.test_library_versions import check

# A database per test on the session's PostgreSQL 18: procrastinate's tables,
# workers and heartbeats are each database's own.
pytestmark = [pytest.mark.pg, pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)]

QUEUE = "reports"
POLL = 0.5
WORKER = ROOT / "tests" / "workloads" / "procrastinate_worker.py"
APP = ROOT / "tests" / "workloads" / "procrastinate_app.py"
# The workers' heartbeat and stalled_worker_timeout (10 s and 30 s by default),
# and the preset's, short: a dead worker is told in seconds. A live worker
# beats ten times within the timeout, so a busy machine never makes it stale.
HEARTBEAT = 0.5
STALLED_AFTER = 5.0
REPORT = 0.2  # seconds a report takes: the healthy flow's thirty run in two

OLDEST = "3.1.0"  # tests/py-libraries/requirements.txt
TOO_OLD = "3.0.2"  # the last release before worker heartbeats, there too
LATEST = version("procrastinate")
RELEASES = (OLDEST, LATEST)


def environment(release: str) -> dict[str, str]:
    """The environment of a process running ``release``: the latest is the
    .venv's, the older ones are first on its PYTHONPATH."""
    if release == LATEST:
        return dict(os.environ)
    path = ROOT / ".py-libraries" / f"procrastinate-{release}"
    if not (path / ".installed").is_file():
        reason = f"procrastinate {release} is missing from {path}: run scripts/bootstrap"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(path), os.environ.get("PYTHONPATH")))),
    }


class Worker:
    def __init__(self, pg: PgDatabase, release: str = LATEST, report: float = REPORT) -> None:
        self.lines: list[str] = []
        timings = (report, HEARTBEAT, STALLED_AFTER)
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), pg.admin_dsn, QUEUE, *(str(t) for t in timings)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment(release),
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def started(self) -> bool:
        return "started" in self.lines

    def job(self) -> str:
        line = wait_until(
            lambda: next((x for x in list(self.lines) if x.startswith("running ")), None),
            timeout=60,
            message=f"a job running: {self.lines}",
        )
        return line.removeprefix("running ")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for worker in made:
        worker.stop()


def app(pg: PgDatabase, release: str, *command: str) -> list[str]:
    """The enqueue-only app (or the deploy's schema step) of ``release``, run
    to its end: its output, after checking it ran that release."""
    done = subprocess.run(
        [sys.executable, str(APP), pg.admin_dsn, *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment(release),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == f"procrastinate {release}", lines[0]
    return lines


def defer(pg: PgDatabase, count: int, release: str = LATEST, task: str = "hang") -> None:
    app(pg, release, "defer", QUEUE, task, str(count))


def install(pg: PgDatabase, release: str = LATEST) -> None:
    """procrastinate's schema, applied as its users apply it, readable by lockwatch."""
    app(pg, release, "schema")
    # Its tables (procrastinate_workers from 3.1), the grant the preset asks for.
    tables = (
        pg.connect()
        .execute(
            "SELECT string_agg(tablename, ', ') FROM pg_tables"
            " WHERE tablename IN ('procrastinate_jobs', 'procrastinate_events', 'procrastinate_workers')"
        )
        .fetchone()
    )
    assert tables is not None
    pg.connect().execute(f"GRANT SELECT ON {tables[0]} TO {MONITOR_USER}")


def start(pg: PgDatabase, workers: list[Worker], count: int, release: str = LATEST) -> list[Worker]:
    made = [Worker(pg, release) for _ in range(count)]
    workers.extend(made)
    for worker in made:
        wait_until(worker.started, timeout=60, message=f"{worker.lines}")
    return made


def runner_for(
    pg: PgDatabase, no_consumer_after: float | None = None, window: float | None = None
) -> TargetRunner:
    """A runner of the queue at the catalogue tests' thresholds (a 5 s window),
    with these two set over them when given."""
    queue = library_queue("procrastinate", QUEUE)
    assert isinstance(queue.source, SqlQueueSource)
    params = {**queue.source.params, "stalled_worker_timeout": STALLED_AFTER}
    thresholds = queue.thresholds
    if no_consumer_after is not None:
        thresholds = replace(thresholds, no_consumer_after=no_consumer_after)
    if window is not None:
        thresholds = replace(thresholds, window=window)
    source = replace(queue.source, params=params)
    queue = replace(queue, source=source, thresholds=thresholds)
    target = Target("main", pg.monitor_dsn, interval=POLL, queues=(queue,))
    return TargetRunner(target, Board(), StateStore(None))


def only(
    runner: TargetRunner, kind: FindingKind, beside: frozenset[FindingKind] = frozenset()
) -> Callable[[], list[Finding]]:
    """A poll's findings of ``kind``, asserting the others are of ``beside`` (none by default)."""

    def poll() -> list[Finding]:
        view = runner.poll_once()
        found = [f for f in view.findings if f.kind is kind]
        others = [f.summary for f in view.findings if f.kind is not kind and f.kind not in beside]
        assert others == [], others
        return found

    return poll


def detected(
    runner: TargetRunner,
    kind: FindingKind,
    since: float,
    timeout: float,
    case: str,
    beside: frozenset[FindingKind] = frozenset(),
) -> Finding:
    """The one finding of ``kind`` (no other but of ``beside``) once a poll has
    it; prints the time from ``since`` (time.monotonic) for docs/benchmarks.md."""
    polled = only(runner, kind, beside)
    [finding] = wait_until(polled, timeout=timeout, interval=POLL, message=case)
    print(f"detection procrastinate-{case}: {time.monotonic() - since:.1f}s")
    return finding


def stuck_by_procrastinate(pg: PgDatabase) -> list[tuple[str, bool]]:
    """procrastinate's own view of its jobs 'doing': each one's id and whether its
    worker is gone (its row pruned, or its heartbeat past the stalled timeout)."""
    rows = (
        pg.connect()
        .execute(
            "SELECT j.id::text,"
            " w.id IS NULL OR now() - w.last_heartbeat > %s * interval '1 second'"
            " FROM procrastinate_jobs j LEFT JOIN procrastinate_workers w ON w.id = j.worker_id"
            " WHERE j.status = 'doing' ORDER BY j.id",
            (STALLED_AFTER,),
        )
        .fetchall()
    )
    return [(str(job), bool(gone)) for job, gone in rows]


# Parametrized by release: the cases whose rows procrastinate writes differently
# between 3.1 and the latest (the healthy flow: 3.2 defers through
# procrastinate_defer_jobs_v1 in batches, 3.3 fetches by priority and lock;
# a killed worker: the worker_id and heartbeats 3.1 introduced). The preset's
# query is the same for both; the cases after these read the same rows written
# the same way since 3.1 (a worker prunes stalled workers at its start, and
# unregisters itself when stopped), so they run at the latest only.
@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_a_healthy_deployment_gives_zero_findings(
    pg: PgDatabase, workers: list[Worker], release: str
) -> None:
    install(pg, release)
    start(pg, workers, 3, release)
    # Thirty deferred at once: over a 5 s window that is growth whenever the
    # machine is too busy to run them within it (it then is, over those 5 s);
    # at the queue's default window (5 minutes) the burst is judged neither
    # growing nor stalled, and the findings a healthy flow must not give
    # (stuck jobs, no consumer) do not depend on the window.
    runner = runner_for(pg, window=QueueThresholds().window)
    try:
        assert runner.poll_once().findings == ()
        defer(pg, 30, release, task="report")
        admin = pg.connect()

        def all_done() -> bool:
            assert only(runner, FindingKind.JOB_STUCK_RUNNING)() == []
            row = admin.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            ).fetchone()
            return row == (30,)

        wait_until(all_done, timeout=120, interval=POLL, message="thirty reports run")
        for _ in range(4):
            assert runner.poll_once().findings == ()
    finally:
        runner.close()


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_one_of_three_workers_killed_mid_job_is_seen_by_its_own_heartbeat(
    pg: PgDatabase, workers: list[Worker], release: str
) -> None:
    install(pg, release)
    three = start(pg, workers, 3, release)
    defer(pg, 3, release)
    jobs = [w.job() for w in three]
    runner = runner_for(pg)
    try:
        assert runner.poll_once().findings == ()
        three[0].process.kill()
        finding = detected(
            runner,
            FindingKind.JOB_STUCK_RUNNING,
            time.monotonic(),
            STALLED_AFTER + 60,
            f"{release} one of three workers killed",
        )
        assert evidence_as(finding, StuckJobsEvidence).job_ids == (jobs[0],)
        # procrastinate's own word: that job is still doing, its worker's heartbeat
        # stale; the other two workers' jobs are doing with theirs fresh.
        assert stuck_by_procrastinate(pg) == sorted(
            [(jobs[0], True), (jobs[1], False), (jobs[2], False)], key=lambda r: int(r[0])
        )
    finally:
        runner.close()


@pytest.mark.slow
def test_every_worker_killed_then_one_restarted_keeps_the_dead_workers_jobs_stuck(
    pg: PgDatabase, workers: list[Worker]
) -> None:
    install(pg)
    two = start(pg, workers, 2)
    defer(pg, 2)
    jobs = sorted((w.job() for w in two), key=int)
    runner = runner_for(pg)
    try:
        assert runner.poll_once().findings == ()
        for worker in two:
            worker.process.kill()
        finding = detected(
            runner,
            FindingKind.JOB_STUCK_RUNNING,
            time.monotonic(),
            STALLED_AFTER + 60,
            f"{LATEST} every worker killed",
        )
        told = evidence_as(finding, StuckJobsEvidence).job_ids
        assert set(told) <= set(jobs), told

        # The two workers' last heartbeats may be a beat apart: the second job is
        # told once its own worker's heartbeat is past the timeout too.
        def both_told() -> bool:
            return any(
                sorted(evidence_as(f, StuckJobsEvidence).job_ids, key=int) == jobs
                for f in only(runner, FindingKind.JOB_STUCK_RUNNING)()
            )

        wait_until(both_told, timeout=10, interval=POLL, message="both dead workers' jobs told")
        # The replacement prunes the dead workers' rows at its start (their
        # jobs' worker_id goes NULL) and takes none of their jobs.
        start(pg, workers, 1)
        admin = pg.connect()
        wait_until(
            lambda: (
                admin.execute(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing' AND worker_id IS NULL"
                ).fetchone()
                == (2,)
            ),
            timeout=30,
            message="the dead workers pruned",
        )
        assert stuck_by_procrastinate(pg) == [(job, True) for job in jobs]
        for _ in range(4):
            [still] = only(runner, FindingKind.JOB_STUCK_RUNNING)()
            assert sorted(evidence_as(still, StuckJobsEvidence).job_ids, key=int) == jobs
    finally:
        runner.close()


@pytest.mark.slow
def test_a_backlog_with_the_workers_stopped_has_no_consumer(
    pg: PgDatabase, workers: list[Worker]
) -> None:
    install(pg)
    [worker] = start(pg, workers, 1)
    after = 3.0  # no_consumer_after, short for the test (2 minutes by default)
    runner = runner_for(pg, no_consumer_after=after)
    admin = pg.connect()
    try:
        view = runner.poll_once()
        assert view.findings == ()
        # procrastinate's record of its live workers: the queue's one consumer.
        assert [q.latest.consumers for q in view.queues if q.latest] == [1]
        # Stopped as a deploy stops it: SIGTERM, procrastinate unregisters the worker.
        worker.process.terminate()
        worker.process.wait(timeout=30)
        wait_until(
            lambda: admin.execute("SELECT count(*) FROM procrastinate_workers").fetchone() == (0,),
            timeout=30,
            message="the worker unregistered",
        )
        defer(pg, 5, task="report")
        # The queue also grew, from none to five in seconds: queue_growing is told
        # too once the polls since the empty one span most of its window (5 s),
        # which comes before or after no_consumer_after by how long the stop and
        # the defer took on the machine. It is the truth either way.
        finding = detected(
            runner,
            FindingKind.QUEUE_NO_CONSUMER,
            time.monotonic(),
            after + 30,
            f"{LATEST} backlog, workers stopped",
            beside=frozenset({FindingKind.QUEUE_GROWING}),
        )
        assert finding.subject.queue == QUEUE
        row = admin.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'"
        ).fetchone()
        assert row == (5,)
    finally:
        runner.close()


def test_check_config_reads_procrastinate_from_3_1_and_refuses_3_0_in_words(
    pg: PgDatabase, tmp_path: Path
) -> None:
    install(pg, OLDEST)
    known = check(pg, tmp_path, "procrastinate")
    assert known.exit_code == 0, known.output
    assert "warning" not in known.output and "problem" not in known.output, known.output

    older = PgDatabase(pg.server)
    try:
        install(older, TOO_OLD)
        refused = check(older, tmp_path, "procrastinate")
    finally:
        older.close()
    assert refused.exit_code == 1, refused.output
    assert (
        "procrastinate schema version 30000 is older than lockwatch reads (from 30100;"
        " known: 30100-30100 (procrastinate 3.1 to 3.10)): upgrade procrastinate"
    ) in refused.stderr
