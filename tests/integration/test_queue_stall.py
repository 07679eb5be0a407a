"""Seed 002 replayed against a real ``lockwatch run``: worker processes claim
webhook jobs under lock 42 while a producer inserts them, one delivery hangs
on a receiver that never answers, and the stalled queue is one finding with
its whole chain. And the cases that must not stall."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.demo.scenarios import (
    WEBHOOK_JOBS_DDL,
    Blackhole,
    Producer,
    Receiver,
    webhook_queue_sql,
)
from tests.fixtures.paths import ROOT, WORKLOADS
from tests.fixtures.postgres import (
    MONITOR_USER,
    PgDatabase,
    advisory_holders,
    free_port,
    wait_until,
)
from tests.fixtures.processes import LOCKS, LOOK, LockwatchProcess, write_config

pytestmark = [pytest.mark.pg, pytest.mark.slow]

WORKER = WORKLOADS / "webhook_worker.py"
INTERVAL = 0.5  # write_config polls every 500 ms
WINDOW = 6.0
STALL_CPU = 0.2
ONE_VERSION = pytest.mark.parametrize("pg_server", ["pg18"], indirect=True)


class Workers:
    """Webhook worker processes of one test, stopped at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, dsn: str, name: str, group: str, *options: str) -> None:
        self.procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), name, group, *options],
                env={**os.environ, "WEBHOOK_DSN": dsn, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL,
            )
        )

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()  # the one stuck in its delivery ignores SIGTERM, as in the seed
                proc.wait(timeout=10)


@pytest.fixture
def workers() -> Iterator[Workers]:
    started = Workers()
    yield started
    started.stop()


def webhook_database(server: LocalCluster, databases: list[PgDatabase]) -> PgDatabase:
    database = PgDatabase(server)
    databases.append(database)
    with database.connect() as admin:
        admin.execute(WEBHOOK_JOBS_DDL)
        admin.execute(f"GRANT SELECT ON webhook_jobs TO {MONITOR_USER}")
    return database


@pytest.fixture
def databases() -> Iterator[list[PgDatabase]]:
    made: list[PgDatabase] = []
    yield made
    for database in made:
        database.close()


def queue(name: str, *, completed: bool) -> str:
    sql = webhook_queue_sql(completed=completed).replace("\n", " ")
    return (
        f"  - name: {name}\n"
        f"    sql: {sql!r}\n"
        f"    window: {WINDOW:g}s\n"
        "    min_growth: 0.2\n"
        f"    stall_cpu: {STALL_CPU:g}\n"
    )


def worker_group(name: str, queue_name: str, tag: str, sessions: str | None = None) -> str:
    text = (
        f"  - name: {name}\n"
        f"    queues: [{queue_name}]\n"
        f"    processes: {{cmdline: 'webhook_worker\\.py \\S+ {tag}'}}\n"
    )
    if sessions is not None:
        text += f"    sessions: [{sessions!r}]\n"
    return text


def worker_sessions(database: PgDatabase) -> int:
    with database.connect() as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'webhook-worker-%%'"
        ).fetchone()
    return 0 if row is None else int(row[0])


def seed_002(
    tmp_path: Path, port: int, database: PgDatabase, extra: str, locks: str = LOCKS
) -> tuple[LockwatchProcess, Blackhole, Receiver, Producer]:
    """A lockwatch run watching ``database`` as ``main`` (``extra``: its
    queues and workers), and seed 002's receivers and producer: its eighth
    job goes to a receiver that never answers."""
    config = write_config(
        tmp_path, port, {"main": database.monitor_dsn}, locks=locks, extra={"main": extra}
    )
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    blackhole, receiver = Blackhole(), Receiver()
    producer = Producer(
        database.admin_dsn, 4.0, lambda n: blackhole.url if n == 8 else receiver.url
    )
    return lockwatch, blackhole, receiver, producer


def polls_of(lockwatch: LockwatchProcess) -> float:
    return lockwatch.metric("lockwatch_polls_total", target="main") or 0


def idle_workers(lockwatch: LockwatchProcess) -> float | None:
    """The webhook workers' processes once their CPU over the window is below
    the queue's stall_cpu (none until the daemon's readings cover a window)."""
    cores = lockwatch.metric("lockwatch_worker_cpu_cores", target="main", group="webhook-workers")
    if cores is None or cores >= STALL_CPU:
        return None
    return lockwatch.metric("lockwatch_worker_processes", target="main", group="webhook-workers")


@ONE_VERSION
def test_seed_002_a_queue_stalled_behind_lock_42_is_one_finding_with_its_chain(
    tmp_path: Path,
    pg_server: LocalCluster,
    databases: list[PgDatabase],
    workers: Workers,
    capsys: pytest.CaptureFixture[str],
) -> None:
    database = webhook_database(pg_server, databases)
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    # The queue reports no completions, so only the workers' CPU can tell a
    # stall from a backlog: the seed's "grows while the CPU stays flat".
    extra = (
        "locks: {named: [{name: webhook-delivery, key: 42, max_hold: 3s}]}\n"
        "queues:\n"
        + queue("webhooks", completed=False)
        + "workers:\n"
        + worker_group("webhook-workers", "webhooks", tag, sessions="webhook-worker-*")
    )
    lockwatch, blackhole, receiver, producer = seed_002(tmp_path, port, database, extra)
    try:
        # Started first: their imports run while lockwatch starts.
        for number in range(1, 7):
            workers.start(database.admin_dsn, f"webhook-worker-{number}", tag)
        lockwatch.start()
        # The replay starts once the daemon sees six idle workers over a whole
        # window: their start-up CPU, in the window after the hang, delayed the
        # stall past the polls counted below on a loaded machine (16 > 15).
        wait_until(
            lambda: idle_workers(lockwatch) == 6,
            timeout=WINDOW * 5,
            interval=LOOK,
            message="the six workers are seen idle",
        )

        replay_started = time.monotonic()
        producer.start()
        wait_until(lambda: blackhole.accepted, message="a worker takes the poisoned job")
        stall_started = time.monotonic()
        polls_at_stall = polls_of(lockwatch)
        # Counted in the daemon's own polls, not in seconds: on a busy machine
        # its polls come late, and the window and the two polls with them.
        stalled = wait_until(
            lambda: lockwatch.finding("queue_stalled", "main"),
            timeout=60,
            interval=LOOK,
            message="queue_stalled",
        )
        detected = time.monotonic()
        polls = polls_of(lockwatch) - polls_at_stall
        # The window's polls, two more, and the one that may be under way as it is read.
        assert polls <= WINDOW / INTERVAL + 3, f"queue_stalled took {polls:g} polls of the stall"
        with capsys.disabled():
            print(
                f"\nseed 002 replay: queue_stalled {detected - replay_started:.1f}s after the "
                f"replay started, {detected - stall_started:.1f}s and {polls:g} polls after the "
                f"delivery hung (window {WINDOW:g}s, polls every {INTERVAL:g}s)"
            )

        (holder,) = advisory_holders(database.admin_dsn, 42)
        evidence = stalled["evidence"]
        assert stalled["subject"]["queue"] == "webhooks"
        chain = evidence["lock"]
        assert (chain["lock"], chain["key"]) == ("webhook-delivery", "42")
        assert chain["worker_sessions"] == 6
        assert chain["waiting_sessions"] == 5
        (facts,) = chain["holders"]
        assert facts["pid"] == holder
        assert facts["application_name"].startswith("webhook-worker-")
        assert facts["client_addr"] == "127.0.0.1"
        assert facts["state"] == "idle"
        assert facts["worker_group"] == "webhook-workers"
        assert evidence["worker_cpu_cores"] < STALL_CPU
        assert evidence["workers"][0]["processes"] == 6
        assert f"held by pid {holder} (webhook-worker-" in stalled["summary"]
        assert "5 of 6 worker sessions wait on lock webhook-delivery (42)" in stalled["summary"]
        related = {(r["kind"], r["subject"]["lock"]) for r in evidence["related"]}
        assert ("lock_convoy", "webhook-delivery") in related
        assert (lockwatch.metric("lockwatch_queue_depth", target="main", queue="webhooks") or 0) > 0
        wait_until(lambda: "firing queue_stalled" in lockwatch.log(), message="logged once")
    finally:
        producer.stop()
        blackhole.close()
        receiver.close()
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)


@ONE_VERSION
def test_busy_workers_behind_a_faster_producer_an_unbound_queue_and_a_draining_one_never_stall(
    tmp_path: Path,
    pg_server: LocalCluster,
    databases: list[PgDatabase],
    workers: Workers,
) -> None:
    busy, unbound, draining = (webhook_database(pg_server, databases) for _ in range(3))
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    extra = {
        "busy": "queues:\n"
        + queue("webhooks", completed=False)
        + "workers:\n"
        + worker_group("burners", "webhooks", f"{tag}-busy"),
        "unbound": "queues:\n" + queue("webhooks", completed=False),
        "draining": "queues:\n"
        + queue("webhooks", completed=True)
        + "workers:\n"
        + worker_group("fast", "webhooks", f"{tag}-draining", sessions="fast-*"),
    }
    targets = {"busy": busy.monitor_dsn, "unbound": unbound.monitor_dsn}
    targets["draining"] = draining.monitor_dsn
    config = write_config(tmp_path, port, targets, extra=extra)
    lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
    receiver = Receiver()
    producers = [
        Producer(busy.admin_dsn, 15.0, lambda n: receiver.url),
        Producer(unbound.admin_dsn, 3.0, lambda n: receiver.url),
        Producer(draining.admin_dsn, 3.0, lambda n: receiver.url),
    ]
    try:
        lockwatch.start()
        # each job burns 0.1 s of CPU: one worker does at most ten a second
        workers.start(busy.admin_dsn, "burner-1", f"{tag}-busy", "--burn", "0.1", "--no-lock")
        workers.start(draining.admin_dsn, "fast-1", f"{tag}-draining")
        for producer in producers:
            producer.start()

        wait_until(
            lambda: (
                lockwatch.finding("queue_growing", "busy")
                and lockwatch.finding("queue_growing", "unbound")
            ),
            timeout=WINDOW * 4,
            interval=LOOK,
            message="both backlogs grow",
        )
        # A whole window more of polls.
        lockwatch.wait_polls(WINDOW / INTERVAL, "draining", timeout=WINDOW * 3, interval=LOOK)

        assert "firing queue_stalled" not in lockwatch.log()
        assert [f["kind"] for f in lockwatch.findings()].count("queue_stalled") == 0
        busy_growth = lockwatch.finding("queue_growing", "busy")
        assert busy_growth is not None
        evidence = busy_growth["evidence"]
        # Busy: its burner used the stall_cpu, or wanted it and was starved of it on a
        # busy machine (runnable, not waiting on anything): either way never a stall.
        starved = evidence["worker_cpu_state"] == "starved"
        assert evidence["worker_cpu_cores"] > STALL_CPU or starved, evidence
        assert [f for f in lockwatch.findings() if f["target"] == "draining"] == []
        assert (
            lockwatch.metric("lockwatch_queue_completed_total", target="draining", queue="webhooks")
            or 0
        ) > 0
        busy_cores = lockwatch.metric("lockwatch_worker_cpu_cores", target="busy", group="burners")
        assert busy_cores is not None
        assert busy_cores > STALL_CPU or starved, busy_cores
    finally:
        for producer in producers:
            producer.stop()
        receiver.close()
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)


@ONE_VERSION
def test_seed_002_with_a_row_lock_the_stall_and_the_row_lock_convoy_are_one_incident(
    tmp_path: Path, pg_server: LocalCluster, databases: list[PgDatabase], workers: Workers
) -> None:
    """Workers claim jobs with SELECT ... FOR UPDATE (no SKIP LOCKED) and
    deliver inside the claim's transaction; one delivery hangs on a receiver
    that never answers, and every other worker waits on its row."""
    database = webhook_database(pg_server, databases)
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    extra = (
        "queues:\n"
        + queue("webhooks", completed=False)
        + "workers:\n"
        + worker_group("webhook-workers", "webhooks", tag, sessions="webhook-worker-*")
    )
    locks = "{max_hold: 1h, orphan_after: 1h, row_lock_wait: 2s}"
    lockwatch, blackhole, receiver, producer = seed_002(tmp_path, port, database, extra, locks)
    try:
        for number in range(1, 5):
            workers.start(database.admin_dsn, f"webhook-worker-{number}", tag, "--for-update")
        lockwatch.start()
        # All four connected before the replay, so the three that are not hung
        # queue on its row together, as in the seed. With one of them queued
        # alone (the others still starting on a loaded machine) the chain was
        # named transactionid:N: sample/sql/advisory_locks.sql reads tuple
        # locks only while a session waits on one, and a lone row waiter holds
        # its tuple lock, the one that names the row, and waits on the xid.
        wait_until(
            lambda: worker_sessions(database) == 4, interval=LOOK, message="four workers connected"
        )
        producer.start()
        wait_until(lambda: blackhole.accepted, message="a worker takes the poisoned job")
        stalled = wait_until(
            lambda: lockwatch.finding("queue_stalled", "main"),
            timeout=60,
            interval=LOOK,
            message="the stall",
        )
        convoy = wait_until(
            lambda: lockwatch.finding("row_lock_convoy", "main"),
            timeout=30,
            interval=LOOK,
            message="the convoy",
        )

        # Ground truth: the server's own view of who holds the poisoned job's row.
        with database.connect() as admin:
            hung, waiting = admin.execute(
                "SELECT h.pid, (SELECT count(*) FROM pg_stat_activity AS w"
                "  WHERE h.pid = ANY (pg_blocking_pids(w.pid)))"
                " FROM pg_stat_activity AS h WHERE h.application_name LIKE 'webhook-worker-%%'"
                " AND h.state = 'idle in transaction'"
            ).fetchone() or (None, 0)
        assert hung is not None and waiting >= 1
        chain = stalled["evidence"]["lock"]
        assert chain["locktype"] in ("transactionid", "tuple")
        assert chain["lock"] == "a row of webhook_jobs"
        (holder,) = chain["holders"]
        assert (holder["pid"], holder["worker_group"]) == (hung, "webhook-workers")
        assert convoy["evidence"]["root"]["pid"] == hung

        def one_incident() -> dict[str, Any] | None:
            document = requests.get(f"{lockwatch.base}/api/v1/incidents", timeout=5).json()
            # open ones: the backlog's growth, seen before the stall, may have
            # been an incident of the queue's that resolved into this one
            mine = [
                i for i in document["incidents"] if i["target"] == "main" and i["state"] == "open"
            ]
            joined = [i for i in mine if {"queue_stalled", "row_lock_convoy"} <= set(i["kinds"])]
            return joined[0] if len(mine) == 1 and joined else None

        incident = wait_until(
            one_incident, timeout=10, interval=LOOK, message="one incident of both"
        )
        assert (incident["root"]["kind"], incident["root"]["pid"]) == ("session", hung)
        assert f"pid {hung}" in incident["title"]
        assert "holds a row of webhook_jobs" in incident["title"]
    finally:
        producer.stop()
        blackhole.close()
        receiver.close()
        assert lockwatch.stop() == 0, lockwatch.log(whole=True)
