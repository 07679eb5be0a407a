"""Every queue and worker source against the real thing: PostgreSQL, a
redis-server, procrastinate, RQ and Celery creating real jobs, real
processes, a cgroup tree, and a real Prometheus."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack

import psycopg
import pytest
import redis
from prometheus_client import CollectorRegistry, Counter, start_http_server
from psycopg.rows import dict_row

from lockwatch.demo.scenarios import WEBHOOK_JOBS_DDL, webhook_queue_sql
from lockwatch.model.findings import FindingKind, Subject
from lockwatch.model.queues import WorkerSample, WorkerView
from lockwatch.runner import TargetRunner
from lockwatch.sample.base import SampleContext, SampleError
from lockwatch.sample.presets.registry import preset_source
from lockwatch.sample.redis import RedisQueueSampler
from lockwatch.sample.workers import (
    CgroupCpuSampler,
    ProcessCpuSampler,
    PrometheusCpuSampler,
)
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.pooler import PoolerSpec
from lockwatch.settings.queues import (
    CgroupCpu,
    ProcessMatch,
    PrometheusCpu,
    Queue,
    QueueThresholds,
    RedisQueueSource,
    RedisType,
    SqlQueueSource,
    WorkerGroup,
)
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView
from tests.fixtures.postgres import (
    MONITOR_USER,
    PgDatabase,
    free_port,
    queue_on_lock,
    run_in_thread,
    wait_until,
)
from tests.fixtures.prometheus import Prometheus
from tests.fixtures.redis import RedisServer

REDIS_PASSWORD = "redis-pw-" + str(free_port())


def now() -> SampleContext:
    return SampleContext(datetime.now(UTC), None)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis"), password=REDIS_PASSWORD) as server:
        yield server


@pytest.fixture
def broker(redis_server: RedisServer) -> Iterator[redis.Redis]:
    with redis_server.client() as client:
        client.flushdb()
        yield client


OPENED: list[RedisQueueSampler | PrometheusCpuSampler] = []


@pytest.fixture(autouse=True)
def close_samplers() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


Sampler = TypeVar("Sampler", RedisQueueSampler, PrometheusCpuSampler)


def opened(sampler: Sampler) -> Sampler:
    OPENED.append(sampler)
    return sampler


class RedisOptions(TypedDict, total=False):
    """What ``redis_queue`` passes on to RedisQueueSource."""

    layout: str
    type: RedisType
    group: str | None
    timeout: float


def redis_queue(url: str, key: str, **options: Unpack[RedisOptions]) -> RedisQueueSampler:
    source = RedisQueueSource(url, (key,), **options)
    return opened(RedisQueueSampler(Queue(key, source)))


# -- Redis -------------------------------------------------------------------


def test_redis_lists_sorted_sets_and_streams_report_their_depth(
    redis_server: RedisServer, broker: redis.Redis
) -> None:
    broker.rpush("mail", *range(5))
    broker.zadd("retries", {"a": 1, "b": 2})
    for n in range(7):
        broker.xadd("events", {"n": n})
    broker.xgroup_create("events", "senders", id="0")
    broker.xreadgroup("senders", "c1", {"events": ">"}, count=3)  # 3 delivered, not acked
    reply = broker.xreadgroup("senders", "c1", {"events": "0"}, count=1)
    assert isinstance(reply, list)  # RESP2's shape: [[stream, [(id, fields)]]]
    (delivered,) = reply[0][1]
    broker.xack("events", "senders", delivered[0])

    assert redis_queue(redis_server.url, "mail").sample(now())["mail"].depth == 5
    retries = redis_queue(redis_server.url, "retries", type=RedisType.ZSET)
    assert retries.sample(now())["retries"].depth == 2
    stream = redis_queue(redis_server.url, "events", type=RedisType.STREAM)
    assert stream.sample(now())["events"].depth == 7
    group = redis_queue(redis_server.url, "events", type=RedisType.STREAM, group="senders")
    reading = group.sample(now())["events"]
    assert reading.depth == 4 + 2  # never delivered, and delivered but not acknowledged
    assert reading.in_flight == 2
    assert reading.completed_total == 1
    assert reading.oldest_age_seconds is not None and reading.oldest_age_seconds < 60


def test_a_missing_list_is_empty_and_a_key_of_another_type_is_a_clear_error(
    redis_server: RedisServer, broker: redis.Redis
) -> None:
    broker.set("not-a-list", "x")

    assert redis_queue(redis_server.url, "gone").sample(now())["gone"].depth == 0
    with pytest.raises(SampleError, match="a key of not-a-list holds another type than list"):
        redis_queue(redis_server.url, "not-a-list").sample(now())
    with pytest.raises(SampleError, match="has no consumer group 'nobody'"):
        broker.xadd("events", {"n": 1})
        redis_queue(redis_server.url, "events", type=RedisType.STREAM, group="nobody").sample(now())


def test_a_redis_that_stops_fails_its_queue_without_showing_the_password(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path, password=REDIS_PASSWORD) as server:
        sampler = redis_queue(server.url, "mail", timeout=1.0)
        assert sampler.sample(now())["mail"].depth == 0
        server.stop()

        with pytest.raises(SampleError) as caught:
            sampler.sample(now())

    message = str(caught.value)
    assert message.startswith("queue mail: redis: ")
    assert "connect" in message.lower()
    assert REDIS_PASSWORD not in message


def test_the_rq_preset_reads_a_real_rq_queue_and_its_finished_jobs(
    redis_server: RedisServer, broker: redis.Redis
) -> None:
    import rq  # the job libraries where they are used: not in every worker's collection

    queue = rq.Queue("emails", connection=broker)
    for n in range(3):
        queue.enqueue("operator.add", n, 1)
    source = preset_source("rq", queue="emails", redis_url=redis_server.url, timeout=2.0)
    sampler = opened(RedisQueueSampler(Queue("emails", source)))

    before = sampler.sample(now())["emails"]
    rq.SimpleWorker([queue], connection=broker).work(burst=True)
    after = sampler.sample(now())["emails"]

    assert before.depth == 3
    assert before.oldest_age_seconds is not None and 0 <= before.oldest_age_seconds < 60
    assert after.depth == 0
    assert after.oldest_age_seconds is None
    assert after.completed_total is not None and before.completed_total is not None
    assert after.completed_total - before.completed_total == 3


def test_the_celery_preset_counts_every_priority_of_a_real_celery_queue(
    redis_server: RedisServer, broker: redis.Redis
) -> None:
    from celery import Celery

    app = Celery("lockwatch-test", broker=redis_server.url)
    app.conf.task_default_queue = "mail"
    source = preset_source("celery", queue="mail", redis_url=redis_server.url, timeout=2.0)
    sampler = opened(RedisQueueSampler(Queue("mail", source)))
    try:
        for n in range(3):
            app.send_task("mail.send", args=(n,))
        app.send_task("mail.send", args=(9,), priority=9)

        assert sampler.sample(now())["mail"].depth == 4
        assert broker.llen("mail") < 4, "the priority message went to the same list"
        app.control.purge()
        assert sampler.sample(now())["mail"].depth == 0
    finally:
        app.close()


def test_the_procrastinate_preset_reads_real_procrastinate_jobs(pg: PgDatabase) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=pg.admin_dsn))

    @app.task(queue="emails", name="send")
    def send(n: int) -> None:
        del n

    async def defer_and_work() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for n in range(3):
                await send.defer_async(n=n)
            await send.configure(queue="other").defer_async(n=9)
            readings.append(read())
            await app.run_worker_async(queues=["emails"], wait=False)

    def read() -> dict[str, Any]:
        assert isinstance(source, SqlQueueSource)  # as asserted below, where source is made
        with psycopg.connect(pg.admin_dsn, row_factory=dict_row) as conn:
            (row,) = conn.execute(source.query, dict(source.params)).fetchall()
        return row

    source = preset_source("procrastinate", queue="emails", redis_url=None, timeout=2.0)
    assert isinstance(source, SqlQueueSource)
    readings: list[dict[str, Any]] = []
    asyncio.run(defer_and_work())
    readings.append(read())

    before, after = readings
    assert before["depth"] == 3
    assert before["completed_total"] == 0
    assert before["oldest_age_seconds"] is not None and float(before["oldest_age_seconds"]) < 60
    assert after["depth"] == 0
    assert after["completed_total"] == 3
    assert after["oldest_age_seconds"] is None


# -- SQL queues through a target's runner --------------------------------------


class TargetOptions(TypedDict, total=False):
    """What ``Runners.for_pg`` passes on to Target."""

    connect_timeout: float
    workers: tuple[WorkerGroup, ...]
    pgbouncer: PoolerSpec | None


class Runners:
    """TargetRunners of one test, their sessions closed at teardown."""

    def __init__(self) -> None:
        self.made: list[TargetRunner] = []

    def __call__(self, settings: Target) -> TargetRunner:
        runner = TargetRunner(settings, Board(), StateStore(None))
        self.made.append(runner)
        return runner

    def for_pg(
        self, pg: PgDatabase, queues: tuple[Queue, ...], **target: Unpack[TargetOptions]
    ) -> TargetRunner:
        return self(
            Target(
                "main",
                pg.monitor_dsn,
                interval=0.5,
                statement_timeout=1.0,
                locks=LockSettings(convoy_waiters=1, convoy_wait=0.0),
                queues=queues,
                **target,
            )
        )


@pytest.fixture
def runners() -> Iterator[Runners]:
    made = Runners()
    yield made
    for runner in made.made:
        runner.close()


def sql_queue(name: str, query: str) -> Queue:
    return Queue(name, SqlQueueSource(query), QueueThresholds(window=5.0))


def test_a_failing_queue_query_downs_that_queue_only_while_locks_and_other_queues_go_on(
    pg: PgDatabase, runners: Runners
) -> None:
    admin = pg.connect()
    admin.execute(WEBHOOK_JOBS_DDL)
    admin.execute(
        "INSERT INTO webhook_jobs (url) SELECT 'http://127.0.0.1:9/' FROM generate_series(1, 4)"
    )
    admin.execute(f"GRANT SELECT ON webhook_jobs TO {MONITOR_USER}")
    admin.execute("CREATE TABLE secret_jobs (id int)")
    admin.execute("SELECT pg_advisory_lock(42)")
    waiter = pg.connect("webhook-worker-2")
    blocked = run_in_thread(lambda: waiter.execute("SELECT pg_advisory_lock(42)"))
    runner = runners.for_pg(
        pg,
        (
            sql_queue("webhooks", webhook_queue_sql()),
            sql_queue("missing", "SELECT count(*) AS depth FROM no_such_table"),
            sql_queue("shapeless", "SELECT 1 AS how_many, 2 AS depth"),
            sql_queue("forbidden", "SELECT count(*) AS depth FROM secret_jobs"),
            sql_queue("slow", "SELECT 1 AS depth FROM pg_sleep(3)"),
        ),
    )

    view = wait_until(
        lambda: (
            (v := runner.poll_once()).findings
            and any(f.kind is FindingKind.LOCK_CONVOY for f in v.findings)
            and v
        ),
        message="the convoy is seen",
    )
    assert isinstance(view, TargetView)

    down = {f.subject.source: f.summary for f in view.findings if f.kind is FindingKind.TARGET_DOWN}
    assert set(down) == {"queue/missing", "queue/shapeless", "queue/forbidden", "queue/slow"}
    assert 'relation "no_such_table" does not exist' in down["queue/missing"]
    assert "unexpected column(s) how_many" in down["queue/shapeless"]
    assert "grant SELECT on its tables to the role" in down["queue/forbidden"]
    assert "query cancelled by statement_timeout (1s)" in down["queue/slow"]
    (webhooks,) = [q for q in view.queues if q.name == "webhooks"]
    assert webhooks.latest is not None
    assert webhooks.latest.depth == 4
    assert webhooks.latest.completed_total == 0
    health = {h.name: h for h in view.sources}
    assert health["queue/webhooks"].up
    assert not health["queue/missing"].up and health["queue/missing"].errors_total >= 1
    assert view.up, "the target itself stays up"
    admin.execute("SELECT pg_advisory_unlock(42)")
    blocked.result()


def test_a_queue_of_a_target_that_is_down_waits_without_a_finding_of_its_own(
    runners: Runners,
) -> None:
    down_target = Target(
        "main",
        f"postgresql://nobody@127.0.0.1:{free_port()}/app",
        connect_timeout=1.0,
        queues=(sql_queue("webhooks", webhook_queue_sql()),),
    )
    runner = runners(down_target)

    view = runner.poll_once()

    assert [f.subject for f in view.findings] == [Subject()]
    (health,) = view.sources
    assert not health.up and health.failing_since is None
    assert "database is down" in (health.error or "")


def test_worker_sessions_are_counted_by_state_with_the_lock_they_wait_on(
    pg: PgDatabase, runners: Runners
) -> None:
    holder = pg.connect("webhook-worker-1")
    holder.execute("SELECT pg_advisory_lock(42)")
    waiters = [pg.connect(f"webhook-worker-{n}") for n in (2, 3)]
    blocked = [queue_on_lock(c, 42) for c in waiters]
    pg.connect("webhook-worker-4")  # idle
    pg.connect("someone-else")
    group = WorkerGroup("webhook-workers", ("webhooks",), sessions=("webhook-worker-*",))
    runner = runners.for_pg(pg, (sql_queue("webhooks", "SELECT 0 AS depth"),), workers=(group,))

    def seen() -> object:
        (workers,) = runner.poll_once().workers
        return workers.sessions and workers.sessions["waiting_lock"] == 2 and workers

    workers = wait_until(seen, message="both waiters seen")
    assert isinstance(workers, WorkerView)

    assert workers.sessions == {
        "active": 0,
        "waiting_lock": 2,
        "idle": 2,
        "idle_in_transaction": 0,
        "other": 0,
    }
    (wait,) = workers.waiting_on
    assert (wait.lock, wait.key, wait.sessions) == ("42", "42", 2)
    holder.execute("SELECT pg_advisory_unlock(42)")
    for call in blocked:
        call.result()


# -- worker CPU ------------------------------------------------------------------

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"
PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]])\n"
    "child.wait()\ntime.sleep(60)\n"
)


def test_local_processes_and_their_children_add_up_their_cpu(tmp_path: Path) -> None:
    marker = f"lockwatch-cpu-test-{free_port()}"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, BURN.format(seconds=3.0), marker],
        stdin=subprocess.DEVNULL,
    )
    idle = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], stdin=subprocess.DEVNULL
    )
    pidfile = tmp_path / "idle.pid"
    pidfile.write_text(f"{idle.pid}\n")
    try:
        by_cmdline = ProcessCpuSampler(ProcessMatch(cmdline=f"{marker}$"))
        # the parent, its burning child (found as a child: its command line
        # does not match), and the idle one
        first = wait_until(
            lambda: (sample := by_cmdline.sample(now())).processes == 3 and sample,
            message="the child started",
        )

        wait_until(
            lambda: by_cmdline.sample(now()).cpu_seconds - first.cpu_seconds >= 0.5,
            message="the child's CPU counted",
        )
        by_pidfile = ProcessCpuSampler(ProcessMatch(pidfile=pidfile))
        assert by_pidfile.sample(now()).processes == 1
        assert (
            ProcessCpuSampler(ProcessMatch(pidfile=tmp_path / "none.pid")).sample(now()).processes
            == 0
        )
    finally:
        for proc in (parent, idle):
            proc.kill()
            proc.wait(timeout=10)


def test_a_cgroup_counts_usage_across_a_restart_of_its_unit(tmp_path: Path) -> None:
    unit = tmp_path / "system.slice" / "worker.service"
    unit.mkdir(parents=True)
    sampler = CgroupCpuSampler(CgroupCpu("system.slice/worker.service", tmp_path))

    def write(usage_usec: int, pids: list[int]) -> None:
        (unit / "cpu.stat").write_text(f"usage_usec {usage_usec}\nuser_usec 1\nsystem_usec 1\n")
        (unit / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))

    write(2_500_000, [10, 11])
    first = sampler.sample(now())
    write(4_000_000, [10, 11, 12])
    second = sampler.sample(now())
    write(500_000, [20])  # restarted: the cgroup counts from 0 again
    third = sampler.sample(now())
    (unit / "cpu.stat").unlink()
    (unit / "cgroup.procs").unlink()
    unit.rmdir()
    stopped = sampler.sample(now())

    assert (first.cpu_seconds, first.processes) == (2.5, 2)
    assert (second.cpu_seconds, second.processes) == (4.0, 3)
    assert (third.cpu_seconds, third.processes) == (4.5, 1)
    assert (stopped.cpu_seconds, stopped.processes) == (4.5, 0)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "cpu.stat").write_text("nr_periods 0\n")
    (tmp_path / "bad" / "cgroup.procs").write_text("")
    with pytest.raises(SampleError, match="no usage_usec"):
        CgroupCpuSampler(CgroupCpu("bad", tmp_path)).sample(now())


def test_a_prometheus_query_reads_worker_cpu_from_a_scraped_exporter(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    cpu = Counter(
        "namedprocess_namegroup_cpu_seconds",
        "CPU of a process group",
        ["groupname", "mode"],
        registry=registry,
    )
    cpu.labels("webhook", "user").inc(10)
    cpu.labels("webhook", "system").inc(2)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        scrape = {"process-exporter": [f"127.0.0.1:{port}"]}
        with Prometheus(tmp_path, scrape=scrape) as prom:
            query = 'sum(namedprocess_namegroup_cpu_seconds_total{groupname="webhook"})'
            sampler = opened(PrometheusCpuSampler(PrometheusCpu(prom.url, query, timeout=2.0)))
            first = wait_until(
                lambda: _sample_or_none(sampler), timeout=60, message="prometheus scraped"
            )
            assert first.cpu_seconds == 12.0
            cpu.labels("webhook", "user").inc(3)
            wait_until(
                lambda: sampler.sample(now()).cpu_seconds == 15.0,
                timeout=30,
                message="the new value scraped",
            )
            with pytest.raises(SampleError, match="matched no series"):
                opened(PrometheusCpuSampler(PrometheusCpu(prom.url, "nothing_here"))).sample(now())
            with pytest.raises(SampleError, match="query failed"):
                opened(PrometheusCpuSampler(PrometheusCpu(prom.url, "sum("))).sample(now())
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    with pytest.raises(SampleError, match="prometheus: "):
        opened(
            PrometheusCpuSampler(
                PrometheusCpu(f"http://127.0.0.1:{free_port()}", "up", timeout=1.0)
            )
        ).sample(now())


def _sample_or_none(sampler: PrometheusCpuSampler) -> WorkerSample | None:
    try:
        return sampler.sample(now())
    except SampleError:
        return None  # not scraped yet
