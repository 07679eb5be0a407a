"""``queue_no_consumer`` with the real libraries from npm: pg-boss 12 (a
send-only producer that keeps enqueueing while every worker is killed) and
graphile-worker 0.16 (jobs added with its own ``graphile_worker.add_job``
after its last worker stopped). Ground truth is the libraries' own tables:
pg-boss's instances (none working the queue beats any more) and jobs waiting
in both, never lockwatch.

The detection time is printed from the moment the last worker was gone; the
libraries' own liveness comes first (pg-boss judges an instance dead three
heartbeats after its last one), then ``no_consumer_after``, then a poll."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from lockwatch.model.evidence import ConsumerCount, NoConsumerEvidence
from lockwatch.model.findings import Finding, FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.queues import Queue
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from tests.fixtures.evidence import evidence_as
from tests.fixtures.postgres import PgDatabase, wait_until
from tests.integration.test_catalogue_libraries import (
    Workers,
    grant_graphile_worker,
    grant_schema,
    library_queue,
    url,
    workers,
)
from tests.integration.test_lib_pg_boss import QUEUE, Boss, boss, pg, server

# test_lib_pg_boss's and test_catalogue_libraries' fixtures, used here
__all__ = ["boss", "pg", "server", "workers"]

pytestmark = pytest.mark.pg

POLL = 0.5
BUDGET = 3.0  # no_consumer_after, short for the test (2 minutes by default)


def watching(pg: PgDatabase, queue: Queue) -> TargetRunner:
    short = replace(queue, thresholds=replace(queue.thresholds, no_consumer_after=BUDGET))
    target = Target("main", pg.monitor_dsn, interval=POLL, queues=(short,))
    return TargetRunner(target, Board(), StateStore(None))


def no_consumer(runner: TargetRunner) -> Finding | None:
    view = runner.poll_once()
    return next((f for f in view.findings if f.kind is FindingKind.QUEUE_NO_CONSUMER), None)


def detected(runner: TargetRunner, gone: float, case: str) -> Finding:
    finding = wait_until(lambda: no_consumer(runner), timeout=60, interval=POLL, message=case)
    # collected for docs/benchmarks.md
    print(f"detection {case}: {time.monotonic() - gone:.1f}s (budget {BUDGET}s, poll {POLL}s)")
    return finding


def test_pg_boss_every_worker_killed_while_the_producer_enqueues(
    pg: PgDatabase, boss: Boss
) -> None:
    # The producer sends a job every 200 ms and works no queue.
    *workers, producer = boss.start_together(("worker", ""), ("worker", ""), ("producer", ""))
    grant_schema(pg, "pgboss")
    runner = watching(pg, library_queue("pg-boss", QUEUE))
    try:
        wait_until(
            lambda: all(w.count("completed") for w in workers),
            timeout=60,
            message="both workers completing jobs",
        )
        for _ in range(6):  # served: never a finding while they work
            assert no_consumer(runner) is None
        for worker in workers:
            worker.kill()
        gone = time.monotonic()
        finding = detected(runner, gone, "pg-boss-12.38.0 every worker killed, producer up")
        evidence = evidence_as(finding, NoConsumerEvidence)
        assert evidence.consumers == (ConsumerCount("library", 0),)
        assert evidence.depth > 0 and evidence.budget_seconds == BUDGET
        db = pg.connect()
        # pg-boss's own word: jobs wait, no instance working a queue beats any
        # more, and the producer, which still beats, works none.
        (waiting,) = db.execute(
            "SELECT count(*) FROM pgboss.job WHERE name = %s AND state = 'created'", (QUEUE,)
        ).fetchone() or (0,)
        assert waiting > 0
        rows = db.execute(
            "SELECT jsonb_array_length(workers) > 0,"
            " heartbeat_on >= now() - interval '2 seconds' FROM pgboss.instance"
        ).fetchall()
        assert (True, True) not in rows and (False, True) in rows
        assert producer.process.poll() is None
        # A worker comes back: served again, the finding ends.
        boss.start("worker")
        wait_until(lambda: no_consumer(runner) is None, timeout=60, interval=POLL, message="back")
    finally:
        runner.close()


def test_graphile_worker_jobs_added_after_its_last_worker_stopped(
    pg: PgDatabase, workers: Workers
) -> None:
    worker = workers.start("graphile_worker.js", url(pg), "emails")
    grant_graphile_worker(pg)
    runner = watching(pg, library_queue("graphile-worker", "emails"))
    try:
        for _ in range(6):
            assert no_consumer(runner) is None
        worker.stop()
        gone = time.monotonic()
        db = pg.connect()
        # The web app enqueues with graphile-worker's own SQL API.
        for n in range(3):
            db.execute("SELECT graphile_worker.add_job('emails', json_build_object('n', %s))", (n,))
        finding = detected(runner, gone, "graphile-worker-0.16.6 last worker stopped")
        # graphile-worker's own rows: the 3 added (and any its last worker added
        # as it stopped), none locked.
        (waiting,) = db.execute(
            "SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NULL"
        ).fetchone() or (0,)
        assert evidence_as(finding, NoConsumerEvidence).depth == waiting >= 3
        (listening,) = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN \"jobs:insert\"%'"
        ).fetchone() or (None,)
        assert listening == 0
    finally:
        runner.close()
