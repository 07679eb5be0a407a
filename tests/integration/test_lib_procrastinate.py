"""procrastinate 3 (from PyPI) run as its users run it: worker processes of
their own, one killed mid-job while the others live. Ground truth is
procrastinate's own: its jobs' worker_id and status, its workers' heartbeats
(procrastinate_workers), never lockwatch."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing

import procrastinate
import pytest

from lockwatch.demo.pgbinaries import embedded_bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.model.evidence import StuckJobsEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import MONITOR_PASSWORD, MONITOR_USER, PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import library_queue

pytestmark = pytest.mark.pg

QUEUE = "reports"
POLL = 0.5
WORKER = ROOT / "tests" / "workloads" / "procrastinate_worker.py"
STALLED_AFTER = 30  # procrastinate's default stalled_worker_timeout, the preset's rule


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCluster]:
    with LocalCluster(embedded_bin_dir()) as cluster:
        cluster.create_password_role(MONITOR_USER, MONITOR_PASSWORD, "pg_monitor")
        yield cluster


@pytest.fixture
def pg(server: LocalCluster) -> Iterator[PgDatabase]:
    with closing(PgDatabase(server)) as database:
        yield database


class Worker:
    def __init__(self, pg: PgDatabase) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), pg.admin_dsn, QUEUE],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
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


def defer(pg: PgDatabase, count: int) -> None:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=pg.admin_dsn))

    @app.task(queue=QUEUE, name="hang")
    def hang() -> None:
        """Only deferred here: the workers run it."""

    async def go() -> None:
        async with app.open_async():
            for _ in range(count):
                await hang.defer_async()

    asyncio.run(go())


def install(pg: PgDatabase) -> None:
    """procrastinate's schema, applied as its users apply it, readable by lockwatch."""
    schema = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=pg.admin_dsn))

    async def apply() -> None:
        async with schema.open_async():
            await schema.schema_manager.apply_schema_async()

    asyncio.run(apply())
    admin = pg.connect()
    for table in ("procrastinate_jobs", "procrastinate_events", "procrastinate_workers"):
        admin.execute(f"GRANT SELECT ON {table} TO {MONITOR_USER}")


@pytest.mark.slow
def test_one_of_three_workers_killed_mid_job_is_seen_by_its_own_heartbeat(
    pg: PgDatabase, workers: list[Worker]
) -> None:
    admin = pg.connect()
    install(pg)
    workers.extend(Worker(pg) for _ in range(3))
    for worker in workers:
        wait_until(worker.started, timeout=60, message=f"{worker.lines}")
    defer(pg, 3)
    jobs = [w.job() for w in workers]
    target = Target(
        "main", pg.monitor_dsn, interval=POLL, queues=(library_queue("procrastinate", QUEUE),)
    )
    runner = TargetRunner(target, Board(), StateStore(None))
    try:
        assert runner.poll_once().findings == ()
        workers[0].process.kill()
        killed = time.monotonic()

        def stuck() -> list[Finding]:
            view = runner.poll_once()
            found = [f for f in view.findings if f.kind is FindingKind.JOB_STUCK_RUNNING]
            assert len(view.findings) == len(found), [f.summary for f in view.findings]
            return found

        [finding] = wait_until(stuck, timeout=STALLED_AFTER + 60, interval=POLL, message="stuck")
        seconds = time.monotonic() - killed
        print(f"detection procrastinate-3.10.0 one of three workers killed: {seconds:.1f}s")
        assert evidence_as(finding, StuckJobsEvidence).job_ids == (jobs[0],)
        # procrastinate's own word: the job is still doing, its worker's heartbeat stale.
        row = admin.execute(
            "SELECT j.status, now() - w.last_heartbeat > interval '30 seconds'"
            " FROM procrastinate_jobs j JOIN procrastinate_workers w ON w.id = j.worker_id"
            " WHERE j.id = %s",
            (int(jobs[0]),),
        ).fetchone()
        assert row == ("doing", True)
    finally:
        runner.close()
