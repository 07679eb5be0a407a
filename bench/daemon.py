"""``lockwatch run`` as its own process: its footprint at each number of locks,
measured from outside with psutil and over HTTP."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.process import Process, http_get, samples, series_count
from bench.server import LOCKWATCH_ROLE, BenchServer
from lockwatch.demo.pgcluster import free_port

TARGET = "bench"
SCRAPES = 3


def target_config(
    name: str, dsn: str, interval: float, locks: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One entry of the config's ``targets:``; budgets no run reaches unless overridden."""
    return {
        "name": name,
        "dsn": dsn,
        "interval": f"{interval:g}s",
        "locks": {"max_hold": "24h", "orphan_after": "24h", **(locks or {})},
    }


class LockwatchProcess(Process):
    """``python -m lockwatch run -c <file>`` with the given targets (under ``nice`` if asked)."""

    def __init__(
        self,
        targets: list[dict[str, Any]],
        workdir: Path,
        name: str,
        top: Mapping[str, Any] | None = None,
        nice: int = 0,
    ) -> None:
        self.base = f"http://127.0.0.1:{free_port()}"
        config = workdir / f"{name}.yml"
        listen = self.base.removeprefix("http://")
        config.write_text(yaml.safe_dump({"listen": listen, "targets": targets, **(top or {})}))
        niced = ["nice", "-n", str(nice)] if nice else []
        super().__init__(
            [*niced, sys.executable, "-m", "lockwatch", "run", "-c", str(config)],
            workdir / f"{name}.log",
        )

    def __enter__(self) -> LockwatchProcess:
        self.start_serving(f"{self.base}/healthz")
        return self

    def get(self, path: str) -> tuple[float, bytes]:
        started = time.perf_counter()
        body = http_get(self.base + path).content
        return time.perf_counter() - started, body

    def metric(self, name: str, **labels: str) -> float | None:
        values = samples(self.get("/metrics")[1].decode(), name, **labels)
        return values[0] if values else None

    def polls(self, target: str = TARGET) -> int:
        return int(self.metric("lockwatch_polls_total", target=target) or 0)

    def wait_for_polls(self, count: int, target: str = TARGET, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while (done := self.polls(target)) < count:
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"lockwatch finished {done} of {count} polls:\n{self.log_tail()}"
                )
            time.sleep(0.1)
        return done


@dataclass(frozen=True, slots=True)
class Footprint:
    locks: int
    polls: int
    cpu_ms_per_poll: float
    rss_mib: float
    metrics_ms: float  # median of SCRAPES
    metrics_bytes: int
    series: int
    held: float | None  # lockwatch_advisory_locks{state="held"}
    documents: Documents


def cpu_seconds(process: Process) -> float:
    times = process.psutil.cpu_times()
    return float(times.user + times.system)


PATHS = ("/metrics", "/", "/api/v1/locks", "/api/v1/findings")


@dataclass(frozen=True, slots=True)
class DocumentCost:
    path: str
    ms: float  # median wall time of SCRAPES requests
    cpu_ms: float  # the daemon's CPU per request (its polls' share included)
    size: int  # bytes


@dataclass(frozen=True, slots=True)
class Documents:
    locks: int
    targets: int
    costs: tuple[DocumentCost, ...]


def measure_documents(
    daemon: LockwatchProcess, locks: int, targets: int, paths: tuple[str, ...] = PATHS
) -> Documents:
    costs = []
    for path in paths:
        timings, size = [], 0
        cpu_before = cpu_seconds(daemon)
        for _ in range(SCRAPES):
            seconds, body = daemon.get(path)
            timings.append(seconds * 1000)
            size = len(body)
        cpu = (cpu_seconds(daemon) - cpu_before) * 1000 / SCRAPES
        costs.append(DocumentCost(path, statistics.median(timings), cpu, size))
    return Documents(locks, targets, tuple(costs))


def measure(server: BenchServer, workdir: Path, polls: int, interval: float) -> Footprint:
    target = target_config(TARGET, server.dsn(LOCKWATCH_ROLE), interval)
    with LockwatchProcess([target], workdir, f"footprint-{server.locks_held}") as daemon:
        # The first polls see every lock for the first time; steady state comes after.
        first = daemon.wait_for_polls(2)
        # Nothing but polls runs between the two CPU readings: no scrape, no request
        # (unless the polls fell behind and their count has to be read again).
        cpu_before = cpu_seconds(daemon)
        done, cpu_spent = 0, 0.0
        deadline = time.monotonic() + 60 + 3 * polls * interval
        while done < polls:
            if time.monotonic() > deadline:
                raise RuntimeError(f"lockwatch finished {done} of {polls} polls in time")
            time.sleep((polls - done) * interval)
            cpu_spent = cpu_seconds(daemon) - cpu_before
            done = daemon.polls() - first
        rss = daemon.psutil.memory_info().rss
        timings, body = [], b""
        for _ in range(SCRAPES):
            seconds, body = daemon.get("/metrics")
            timings.append(seconds * 1000)
        text = body.decode()
        held = samples(text, "lockwatch_advisory_locks", state="held")
        documents = measure_documents(daemon, server.locks_held, 1)
    return Footprint(
        locks=server.locks_held,
        polls=done,
        cpu_ms_per_poll=cpu_spent * 1000 / done,
        rss_mib=rss / 2**20,
        metrics_ms=statistics.median(timings),
        metrics_bytes=len(body),
        series=series_count(text),
        held=sum(held) if held else None,
        documents=documents,
    )
