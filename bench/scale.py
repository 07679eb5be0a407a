"""Many targets at once: lockwatch's CPU and how late polls start.

Runs in this process: one ``TargetRunner`` poll thread per target, as the
daemon runs them (without its HTTP server), all on the same benchmark
database under different names. How late each poll starts is read from the
runner's ``poll_due``; CPU is this process's, read with psutil while this
thread only waits.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import psutil

from bench.poll_cost import bench_target
from bench.server import BenchServer
from lockwatch.model.views import TargetView
from lockwatch.runner import TargetRunner
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore

WARMUP = 1.5  # seconds for every runner to connect and see the locks once


class TimedRunner(TargetRunner):
    """A runner that notes how late each of its polls started."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.delays: list[float] = []

    def poll_once(self) -> TargetView:
        if self.poll_due is not None:
            self.delays.append(time.monotonic() - self.poll_due)
        return super().poll_once()


@dataclass(frozen=True, slots=True)
class Scale:
    targets: int
    locks: int
    interval: float
    seconds: float
    polls: int
    cpu_percent: float  # of one core
    cpu_ms_per_poll: float
    late_p50_ms: float
    late_p99_ms: float
    late_max_ms: float


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([1.0, 2.0, 3.0, 4.0], 0.99)
    (2.0, 4.0)
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def measure(server: BenchServer, targets: int, seconds: float, interval: float) -> Scale:
    board, store, stop = Board(), StateStore(None), threading.Event()
    runners = [
        TimedRunner(bench_target(server, f"t{n:02d}", interval), board, store, stop_event=stop)
        for n in range(targets)
    ]
    process = psutil.Process()
    try:
        for runner in runners:
            runner.start()
        stop.wait(WARMUP)
        for runner in runners:
            runner.delays.clear()
        cpu_before = process.cpu_times()
        started = time.monotonic()
        stop.wait(seconds)
        cpu_after = process.cpu_times()
        wall = time.monotonic() - started
        delays = [d for runner in runners for d in list(runner.delays)]
    finally:
        stop.set()
        for runner in runners:
            runner.join(timeout=10)
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    if not delays:
        raise RuntimeError(f"no poll started in {seconds:g}s with {targets} target(s)")
    return Scale(
        targets=targets,
        locks=server.locks_held,
        interval=interval,
        seconds=wall,
        polls=len(delays),
        cpu_percent=100 * cpu / wall,
        cpu_ms_per_poll=1000 * cpu / len(delays),
        late_p50_ms=1000 * percentile(delays, 0.5),
        late_p99_ms=1000 * percentile(delays, 0.99),
        late_max_ms=1000 * max(delays),
    )
