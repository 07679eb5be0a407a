"""pgbouncer, Redis and the Prometheus worker source going away and coming back,
one at a time, under one ``lockwatch run``: only the source at fault degrades;
the target stays up, its other sources stay up, and its polls keep their pace."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from lockwatch.demo.pgcluster import LocalCluster
from tests.battery.conftest import Record
from tests.battery.probes import Scrape, scrape
from tests.battery.report import soak
from tests.fixtures.pgbouncer import PgBouncer
from tests.fixtures.postgres import PgDatabase, free_port, wait_until
from tests.fixtures.processes import LockwatchProcess, write_config
from tests.fixtures.prometheus import Prometheus
from tests.fixtures.redis import RedisServer

pytestmark = [pytest.mark.pg, pytest.mark.slow]

INTERVAL = 0.5  # write_config's
DOWN_FOR = 60.0 if soak() else 3.0  # seconds each source stays away
SOURCES = ("pgbouncer", "queue/emails", "workers/reporters")


@dataclass
class Stack:
    lockwatch: LockwatchProcess
    bouncer: PgBouncer
    redis: RedisServer
    prometheus: Prometheus

    def scrape(self) -> Scrape:
        return scrape(self.lockwatch.base)

    def source_down(self, source: str) -> dict[str, object] | None:
        for finding in self.lockwatch.findings():
            if finding["kind"] == "target_down" and finding["subject"].get("source") == source:
                return finding
        return None


@pytest.fixture(scope="module")
def stack(
    battery_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp_path = tmp_path_factory.mktemp("sources")
    db = PgDatabase(battery_cluster)
    registry = CollectorRegistry()
    cpu = Counter("worker_cpu_seconds", "CPU of the reporters", registry=registry)
    cpu.inc(12)
    exporter_port = free_port()
    exporter, exporter_thread = start_http_server(
        exporter_port, addr="127.0.0.1", registry=registry
    )
    bouncer = PgBouncer(battery_cluster)
    prometheus = Prometheus(
        tmp_path / "prometheus", scrape={"reporters": [f"127.0.0.1:{exporter_port}"]}
    )
    try:
        with RedisServer(tmp_path / "redis", password="redis-pw-" + str(exporter_port)) as redis:
            bouncer.start()
            prometheus.start()
            port = free_port()
            extra = f"""\
pgbouncer:
  dsn: "{bouncer.admin_dsn()}"
queues:
  - name: emails
    redis: "{redis.url}"
    key: emails
    timeout: 1s
workers:
  - name: reporters
    queues: [emails]
    prometheus:
      url: {prometheus.url}
      cpu: sum(worker_cpu_seconds_total)
      timeout: 1s
"""
            config = write_config(tmp_path, port, {"main": db.monitor_dsn}, extra={"main": extra})
            lockwatch = LockwatchProcess(config, tmp_path / "lockwatch.log", port)
            lockwatch.start()
            stack = Stack(lockwatch, bouncer, redis, prometheus)
            wait_until(
                lambda: all(stack.scrape().get("lockwatch_source_up", source=s) for s in SOURCES),
                timeout=60,
                message="every source up (Prometheus has scraped the exporter)",
            )
            yield stack
            assert lockwatch.stop() in (0, -signal.SIGKILL), lockwatch.log(whole=True)
    finally:
        prometheus.stop()
        bouncer.close()
        exporter.shutdown()
        exporter.server_close()
        exporter_thread.join(timeout=10)
        db.close()


@dataclass
class Watch:
    """Scrapes taken through an outage, and what the bystanders did in them."""

    scrapes: int = 0
    bystanders_down: int = 0  # scrapes where the target or another source was down

    def look(self, stack: Stack, source: str) -> Scrape:
        now = stack.scrape()
        self.scrapes += 1
        others = [s for s in SOURCES if s != source]
        if now.get("lockwatch_up", target="main") != 1 or not all(
            now.get("lockwatch_source_up", source=s) == 1 for s in others
        ):
            self.bystanders_down += 1
        return now


def outage(
    stack: Stack,
    source: str,
    stop: Callable[[], None],
    start: Callable[[], object],  # what it returns is not used: RedisServer.__enter__ gives itself
    battery: Record,
    case: str,
    injected: str,
) -> None:
    watch = Watch()
    polls = stack.scrape().get("lockwatch_polls_total", target="main") or 0
    started = time.monotonic()
    stop()
    wait_until(
        lambda: watch.look(stack, source).get("lockwatch_source_up", source=source) == 0,
        timeout=30,
        message=f"{source} down",
    )
    detected = time.monotonic()
    finding = wait_until(lambda: stack.source_down(source), message=f"target_down for {source}")
    while time.monotonic() < detected + DOWN_FOR:
        assert watch.look(stack, source).get("lockwatch_source_up", source=source) == 0
        time.sleep(0.1)
    start()
    restarted = time.monotonic()
    wait_until(
        lambda: watch.look(stack, source).get("lockwatch_source_up", source=source) == 1,
        timeout=60,
        message=f"{source} up again",
    )
    wait_until(lambda: stack.source_down(source) is None, message="its target_down resolves")
    recovered = time.monotonic()
    after = watch.look(stack, source)
    polled = int((after.get("lockwatch_polls_total", target="main") or 0) - polls)
    slots = math.floor((recovered - started) / INTERVAL)

    assert watch.bystanders_down == 0, f"the target or another source went down ({watch})"
    assert slots - polled <= 1, f"main polled {polled} times in {slots} slots"
    errors = after.get("lockwatch_source_errors_total", target="main", source=source) or 0
    battery(
        case,
        injected=f"{injected}; away {DOWN_FOR:g} s",
        did=(
            f"source_up{{source={source}}} 0 and target_down with subject {source} after "
            f"{detected - started:.1f} s ({finding['summary']!s:.60}…); {errors:.0f} failed "
            f"attempts, backing off; up again {recovered - restarted:.1f} s after it returned"
        ),
        intact=(
            f"yes: lockwatch_up 1 and the other {len(SOURCES) - 1} sources up in all "
            f"{watch.scrapes} scrapes; the target polled {polled} times in {slots} slots"
        ),
    )


def test_pgbouncer_going_away_degrades_only_the_pooler_source(
    stack: Stack, battery: Record
) -> None:
    outage(
        stack,
        "pgbouncer",
        stack.bouncer.stop,
        stack.bouncer.start,
        battery,
        "pgbouncer-down",
        "pgbouncer stopped (SIGINT), then started on its port",
    )


def test_redis_going_away_degrades_only_its_queue(stack: Stack, battery: Record) -> None:
    outage(
        stack,
        "queue/emails",
        stack.redis.stop,
        stack.redis.__enter__,
        battery,
        "redis-down",
        "redis-server stopped (SIGTERM), then started on its port",
    )


def test_prometheus_going_away_degrades_only_its_worker_group(
    stack: Stack, battery: Record
) -> None:
    outage(
        stack,
        "workers/reporters",
        stack.prometheus.stop,
        stack.prometheus.start,
        battery,
        "prometheus-down",
        "Prometheus (the worker group's CPU source) stopped, then started",
    )
