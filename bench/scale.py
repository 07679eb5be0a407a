"""``python -m bench.scale``: many targets in one process; its CPU, memory and
how late polls start, for two designs side by side.

Arms: ``pool``, the daemon's ``PollScheduler`` (one plan of due times, a
bounded pool of poller threads, first polls spread over the interval);
``thread``, the design it replaced, kept as the baseline: one thread per
target sleeping to its own next poll, every first poll at once; and
``spread``, a thread per target with the pool's spread first polls, which
tells the spreading's share from the pool's. Each runs every target's
unchanged ``TargetRunner.run_due``; the order of the arms turns round row by
row, so that all see the same machine.

Every target is the benchmark database of one of several servers under its
own name, with its own lockwatch session kept open between polls, as the
daemon keeps it: at most ``TARGETS_PER_SERVER`` to a server, since every
poll reads the server-wide ``pg_locks`` and ``pg_stat_activity``, whose cost
grows with the server's sessions (a fleet's targets are instances, each with
one lockwatch session, not 1,000 sessions on one). CPU is getrusage of this
process (every thread: the runners', the scheduler's, this one waiting) and
psutil's of the servers' processes.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.markdown import ms, table, write_into
from bench.poll_cost import bench_target
from bench.server import LOCKWATCH_ROLE, BenchServer
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.runner import TargetRunner, start_spread
from lockwatch.scheduler import PollScheduler
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN = "<!-- begin: written by python -m bench.scale -->"
END = "<!-- end: written by python -m bench.scale -->"
TARGETS = (100, 300, 1_000)
INTERVALS = (10.0, 1.0)
ARMS = ("pool", "thread", "spread")
LOCKS = 100
TARGETS_PER_SERVER = 250  # with the lock holders, within the default max_connections
SETTLE_TIMEOUT = 30.0  # seconds for one arm's sessions to end before the next arm starts
FIRST_POLLS_TIMEOUT = 120.0  # beyond one interval, for every target's first poll


class TimedRunner(TargetRunner):
    """A runner that notes how late each of its polls started."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.delays: list[float] = []

    def poll_once(self) -> TargetView:
        if self.poll_due is not None:
            self.delays.append(time.monotonic() - self.poll_due)
        return super().poll_once()


class ThreadPerTarget:
    """The baseline arms: each runner on a thread of its own, sleeping until
    its next poll is due; every first poll at once, or spread as the pool's."""

    def __init__(
        self, runners: Sequence[TargetRunner], stop: threading.Event, *, spread: bool
    ) -> None:
        self._stop = stop
        self._threads = [
            threading.Thread(
                target=self._loop,
                args=(runner, runner.target.interval * n / len(runners) if spread else 0.0),
                daemon=True,
            )
            for n, runner in enumerate(runners)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _loop(self, runner: TargetRunner, delay: float) -> None:
        due: float | None = time.monotonic() + delay
        self._stop.wait(delay)
        while due is not None:
            due = runner.run_due(due)
            if due is not None:
                self._stop.wait(max(0.0, due - time.monotonic()))

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout)


@dataclass(frozen=True, slots=True)
class Scale:
    arm: str
    targets: int
    interval: float
    seconds: float
    load: float  # the machine's 1-minute load average as the row began
    polls: int
    threads: int
    cpu_percent: float  # of one core, this process
    cpu_ms_per_poll: float
    server_cpu_percent: float  # of one core, every server process
    rss_mib: float
    late_p50_ms: float
    late_p99_ms: float
    late_max_ms: float
    scrape: Scrape


@dataclass(frozen=True, slots=True)
class Scrape:
    """What ``/metrics`` of the arm's board cost as its polls went on:
    the median of SCRAPES renderings (the daemon's ``Metrics.render``)."""

    cpu_ms: float  # of the rendering thread
    bytes_per_target: float
    full_cpu_ms: float  # with ?detail=full: every series of every target
    full_bytes_per_target: float


SCRAPES = 5


def scrape_cost(board: Board, targets: int) -> Scrape:
    """Renders /metrics as Prometheus asks for it, then with ``?detail=full``."""
    metrics = Metrics(board)
    accept = "application/openmetrics-text; version=1.0.0"
    costs = []
    for detail in (False, True):
        timings, size = [], 0
        for _ in range(SCRAPES):
            started = time.thread_time()
            size = len(metrics.render(accept, detail=detail)[0])
            timings.append(1000 * (time.thread_time() - started))
        costs.append((statistics.median(timings), size / targets))
    (cpu, per_target), (full_cpu, full_per_target) = costs
    return Scrape(cpu, per_target, full_cpu, full_per_target)


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([1.0, 2.0, 3.0, 4.0], 0.99)
    (2.0, 4.0)
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def server_cpu(servers: Sequence[BenchServer]) -> Callable[[], float]:
    """A reader of the CPU seconds of the servers' processes so far."""
    postmasters = []
    for server in servers:
        pid = server.cluster.postmaster_pid
        assert pid is not None, "the benchmark server runs"
        postmasters.append(psutil.Process(pid))

    def read() -> float:
        total = 0.0
        for postmaster in postmasters:
            for process in [postmaster, *postmaster.children(recursive=True)]:
                try:
                    times = process.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                total += times.user + times.system
        return total

    return read


def wait_first_polls(board: Board, runners: Sequence[TimedRunner], interval: float) -> None:
    deadline = time.monotonic() + interval + FIRST_POLLS_TIMEOUT
    while time.monotonic() < deadline:
        views = [board.view(runner.target.name) for runner in runners]
        if all(view is not None and view.polls_total >= 1 for view in views):
            return
        time.sleep(min(interval, 0.2))
    raise RuntimeError(f"not every one of {len(runners)} target(s) polled within the deadline")


def settle(servers: Sequence[BenchServer]) -> None:
    """Until the targets' sessions of the arm just measured have ended on
    every server, so that the next arm's figures are its own."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while any(
        server.admin.execute(query, (LOCKWATCH_ROLE,)).fetchone() != (0,) for server in servers
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the targets' sessions still open after {SETTLE_TIMEOUT:g}s")
        time.sleep(0.05)


def measure(
    servers: Sequence[BenchServer], arm: str, targets: int, interval: float, seconds: float
) -> Scale:
    board, store, stop = Board(), StateStore(None), threading.Event()
    runners = [
        TimedRunner(
            bench_target(servers[n % len(servers)], f"t{n:04d}", interval),
            *(board, store),
            stop_event=stop,
        )
        for n in range(targets)
    ]
    scheduler = PollScheduler()
    baseline = None if arm == "pool" else ThreadPerTarget(runners, stop, spread=arm == "spread")
    server_seconds = server_cpu(servers)
    load = os.getloadavg()[0]
    try:
        if baseline is None:
            start_spread(runners, scheduler)
        else:
            baseline.start()
        wait_first_polls(board, runners, interval)
        for runner in runners:
            runner.delays.clear()
        cpu_before, server_before, started = own_cpu(), server_seconds(), time.monotonic()
        stop.wait(seconds)
        cpu, spent = own_cpu() - cpu_before, server_seconds() - server_before
        wall = time.monotonic() - started
        delays = [d for runner in runners for d in list(runner.delays)]
        threads = threading.active_count()
        rss = psutil.Process().memory_info().rss / 2**20
        scrape = scrape_cost(board, targets)  # after the window: its CPU is not the polls'
    finally:
        stop.set()
        for runner in runners:
            runner.join(10)
        if baseline is not None:
            baseline.join(10)
        scheduler.close()
    if not delays:
        raise RuntimeError(f"no poll started in {seconds:g}s with {targets} target(s)")
    return Scale(
        arm=arm,
        targets=targets,
        interval=interval,
        seconds=wall,
        load=load,
        polls=len(delays),
        threads=threads,
        cpu_percent=100 * cpu / wall,
        cpu_ms_per_poll=1000 * cpu / len(delays),
        server_cpu_percent=100 * spent / wall,
        rss_mib=rss,
        late_p50_ms=1000 * percentile(delays, 0.5),
        late_p99_ms=1000 * percentile(delays, 0.99),
        late_max_ms=1000 * max(delays),
        scrape=scrape,
    )


def run(
    workdir: Path,
    rows: Sequence[tuple[int, float]],
    seconds: float,
    say: Callable[[str], None],
) -> tuple[str, int, list[Scale]]:
    """Every row in each arm, the arms' order turning round row by row; the
    servers' version and how many there were."""
    most = max(targets for targets, _ in rows)
    scales: list[Scale] = []
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(BenchServer(workdir))
            for _ in range(math.ceil(most / TARGETS_PER_SERVER))
        ]
        for server in servers:
            server.hold_locks(LOCKS)
        for row, (targets, interval) in enumerate(rows):
            for arm in ARMS[row % len(ARMS) :] + ARMS[: row % len(ARMS)]:
                length = max(seconds, 3 * interval)  # three polls of each target at least
                say(f"{arm}: {targets:,} target(s) every {interval:g}s for {length:g}s")
                scales.append(measure(servers, arm, targets, interval, length))
                settle(servers)
        return servers[0].version, len(servers), scales


def render(scales: Sequence[Scale], postgres: str, servers: int, command: str) -> str:
    lines = [
        "### Scale",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} with `{command}`: {servers} PostgreSQL "
        f"{postgres} servers on the same {os.cpu_count()} CPUs, shared with other work (the "
        "load column). N targets (a server's database under its own name, at most "
        f"{TARGETS_PER_SERVER} to a server, {LOCKS} advisory locks held on each, a session "
        "per target) in one process; "
        "`pool` is the daemon's scheduler, `thread` a thread per target (first polls at once), "
        "`spread` a thread per target with the pool's spread first polls. Lateness: how long "
        "after its due time each poll started. CPU: this process (getrusage) and the "
        "servers' processes, in % of one core. Target: p99 under 100 ms, under 25 % of a "
        "core at 10 s, under 500 MiB. Scrape: `/metrics` (OpenMetrics) rendered from the "
        f"arm's board as its polls went on, CPU of the rendering thread (median of {SCRAPES}) "
        "and bytes per target, by default and with `?detail=full`; target at 1,000 quiet "
        "targets: 150 ms and 2 kB.",
        "",
        *table(
            [
                *("arm", "targets", "every", "load", "polls", "threads"),
                *("CPU %", "CPU ms per poll", "server CPU %", "RSS MiB"),
                *("late p50 ms", "late p99 ms", "late max ms"),
                *("scrape CPU ms", "bytes per target", "full: ms", "full: bytes"),
            ],
            (
                [
                    *(s.arm, f"{s.targets:,}", f"{s.interval:g} s", f"{s.load:.1f}"),
                    *(f"{s.polls:,}", str(s.threads), f"{s.cpu_percent:.1f}"),
                    *(ms(s.cpu_ms_per_poll), f"{s.server_cpu_percent:.1f}", f"{s.rss_mib:.0f}"),
                    *(ms(s.late_p50_ms), ms(s.late_p99_ms), ms(s.late_max_ms)),
                    *(ms(s.scrape.cpu_ms), f"{s.scrape.bytes_per_target:,.0f}"),
                    *(ms(s.scrape.full_cpu_ms), f"{s.scrape.full_bytes_per_target:,.0f}"),
                ]
                for s in scales
            ),
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--targets", default=",".join(map(str, TARGETS)))
    parser.add_argument("--intervals", default=",".join(f"{i:g}" for i in INTERVALS))
    parser.add_argument("--seconds", type=float, default=20.0, help="at least, per row and arm")
    parser.add_argument("--no-write", action="store_true", help="only print the table")
    args = parser.parse_args(argv)
    rows = [
        (int(targets), float(interval))
        for interval in args.intervals.split(",")
        for targets in args.targets.split(",")
    ]
    with tempfile.TemporaryDirectory(prefix="lockwatch-bench-scale-") as workdir:
        postgres, servers, scales = run(
            Path(workdir), rows, args.seconds, lambda line: print(line, file=sys.stderr, flush=True)
        )
    text = render(scales, postgres, servers, " ".join(["python -m bench.scale", *argv]))
    print(text)
    if not args.no_write:
        write_into(DOC, text, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
