"""The tuist case (tuist/tuist#12718) on the real library: six procrastinate
3 worker processes drain a backlog of quarter-second reports; three of them
then take a job that never returns, alive and beating all along. Readings are
the procrastinate preset's, as lockwatch's role reads them; their clock is
injected, a report's quarter second an injected minute, so an hour of learning
takes fifteen seconds. Ground truth is procrastinate's own: the hung jobs are 'doing' with
three distinct workers whose heartbeats are fresh."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.rows import dict_row

from lockwatch.detect.capacity import detect_capacity_lost, window_minutes
from lockwatch.model.evidence import CapacityEvidence
from lockwatch.model.findings import Finding
from lockwatch.model.queues import QueueSample
from lockwatch.sample.presets.registry import preset_source
from lockwatch.sample.queues import reading_from_row
from lockwatch.settings.queues import QueueThresholds, SqlQueueSource
from lockwatch.state.throughput import QueueThroughput
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.integration.test_lib_procrastinate import QUEUE, Worker, install, workers

__all__ = ["workers"]  # test_lib_procrastinate's fixture, used here

pytestmark = [pytest.mark.pg, pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)]

SCALE = 240.0  # injected seconds per real second
# Seconds a report takes: each worker completes one per injected minute, as
# many as a one-second report on a clock of one real second a minute.
REPORT = 60.0 / SCALE
READ_EVERY = 15.0  # injected seconds between readings
THRESHOLDS = QueueThresholds()
BACKLOG = 3000  # reports: more than six workers finish in the test's few minutes


def defer(pg: PgDatabase, reports: int, hung: int) -> None:
    """The application's defers: reports, or ``hung`` jobs that never return,
    at a higher priority so the next free workers take them."""
    import procrastinate  # here, not in every xdist worker's collection of the module

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=pg.admin_dsn))

    @app.task(queue=QUEUE, name="report")
    def report() -> None:
        """Only deferred here: the workers run it."""

    @app.task(queue=QUEUE, name="hang")
    def hang() -> None:
        """Only deferred here: the workers run it."""

    async def go() -> None:
        async with app.open_async():
            if reports:
                await report.batch_defer_async(*({} for _ in range(reports)))
            for _ in range(hung):
                await hang.configure(priority=10).defer_async()

    asyncio.run(go())


class InjectedClock:
    """Readings of the real library, stamped on a clock SCALE times faster."""

    def __init__(self, pg: PgDatabase) -> None:
        self.source = preset_source("procrastinate", queue=QUEUE, redis_url=None, timeout=2.0)
        assert isinstance(self.source, SqlQueueSource)
        # Autocommit as lockwatch's session: each reading its own now().
        self.conn = psycopg.connect(pg.monitor_dsn, row_factory=dict_row, autocommit=True)
        self.real_start = time.monotonic()
        self.start = datetime(2026, 3, 17, 9, 0, tzinfo=UTC)
        self.next = 0.0

    def now(self) -> datetime:
        return self.start + timedelta(seconds=(time.monotonic() - self.real_start) * SCALE)

    def read(self) -> QueueSample | None:
        """A reading once the injected clock reached the next one due."""
        if self.now() < self.start + timedelta(seconds=self.next):
            return None
        self.next += READ_EVERY
        assert isinstance(self.source, SqlQueueSource)
        (row,) = self.conn.execute(self.source.query, dict(self.source.params)).fetchall()
        return reading_from_row(QUEUE, row, self.now())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_of_six_procrastinate_workers_hung_is_capacity_lost_within_an_hour(
    pg: PgDatabase, workers: list[Worker]
) -> None:
    install(pg)
    defer(pg, BACKLOG, 0)
    workers.extend(Worker(pg, report=REPORT) for _ in range(6))
    for worker in workers:
        wait_until(worker.started, timeout=60, message=f"{worker.lines}")
    clock = InjectedClock(pg)
    throughput = QueueThroughput(THRESHOLDS.capacity_learning, THRESHOLDS.capacity_window)
    span = window_minutes(THRESHOLDS)

    def judge() -> Finding | None:
        sample = clock.read()
        if sample is None:
            return None
        assert sample.depth > 0, "the backlog ran dry: the replay needs more reports"
        throughput.add(sample)
        normal = throughput.normal(THRESHOLDS.capacity_min_minutes, span)
        return detect_capacity_lost("main", QUEUE, THRESHOLDS, throughput.recent(), normal)

    def learned() -> bool:
        found = judge()
        assert found is None, f"a healthy queue judged: {found.summary if found else ''}"
        normal = throughput.normal(THRESHOLDS.capacity_min_minutes, span)
        return normal is not None

    # An hour of learned minutes (and the quarter judged) on the injected clock, no finding.
    wait_until(learned, timeout=300, interval=0.05, message="the normal learned")
    normal = throughput.normal(THRESHOLDS.capacity_min_minutes, span)
    # A worker is between two jobs now and then: most of the six are busy.
    assert normal is not None and normal.consumers == 6
    assert normal.in_flight is not None and normal.in_flight >= 4
    print(f"procrastinate 3.10.0, six workers: normal {normal.completed_per_minute}/min")

    defer(pg, 0, 3)
    hung_at = clock.now()
    found = wait_until(judge, timeout=300, interval=0.05, message="capacity lost")
    after = clock.now() - hung_at
    print(f"detection queue_capacity_lost, procrastinate 3 of 6 workers hung: {after}")
    assert after <= timedelta(hours=1)  # the injected clock's hour, not a timing
    evidence = evidence_as(found, CapacityEvidence)
    assert evidence.completed_per_minute < 0.6 * evidence.normal_per_minute
    # Nobody is gone: six workers beat, the hung three among the busy slots.
    assert evidence.consumers == 6 and evidence.in_flight is not None and evidence.in_flight >= 3
    assert not any(c.startswith("consumers gone") for c in evidence.changed)
    # procrastinate's own word: three hung jobs doing, on three workers still beating.
    admin = pg.connect()
    row = admin.execute(
        "SELECT count(*), count(DISTINCT j.worker_id),"
        " bool_and(now() - w.last_heartbeat < interval '5 seconds')"
        " FROM procrastinate_jobs j JOIN procrastinate_workers w ON w.id = j.worker_id"
        " WHERE j.task_name = 'hang' AND j.status = 'doing'"
    ).fetchone()
    assert row == (3, 3, True)
    clock.conn.close()
