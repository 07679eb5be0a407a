"""``python -m bench.flood``: a flood of findings. The CPU of one poll with N
advisory locks all past their budget next to a healthy poll of the same N
(``TargetRunner.poll_once()`` in this process), and the RSS of a ``lockwatch
run`` polling 200,000 locks past their budget, on a server of its own.
Targets: a steady flood (every lock past its budget, unchanged from poll to
poll) at most 3x a healthy poll at 50,000; under 400 MB at 200,000; a changed
flood (one lock taken anew before each poll) in proportion to what changed:
at most 3x a healthy poll with one lock taken anew before each, measured
beside them.
Written to docs/benchmarks.md between its own markers."""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench.convoy import write
from bench.markdown import ms, table
from bench.process import Process, http_get, samples
from bench.server import LOCKWATCH_ROLE, SETTINGS, BenchServer
from lockwatch.daemon import settle_garbage_collector
from lockwatch.demo.pgcluster import free_port
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore

BEGIN = "<!-- begin: written by python -m bench.flood -->"
END = "<!-- end: written by python -m bench.flood -->"
LOCKS = 50_000
RSS_LOCKS = 200_000
CPU_TARGET = 3.0  # over-budget poll against a healthy one (changed: against a changed one)
RSS_TARGET_MB = 400.0
HEALTHY = LockSettings(max_hold=86400.0, orphan_after=86400.0)
# Past their budget at the first poll: held by sessions idle since they took them.
FLOODED = LockSettings(max_hold=0.001, orphan_after=86400.0)
DAEMON_INTERVAL = 10.0
DAEMON_POLLS = 3
# The shared lock table holds max_locks_per_transaction x 300 connections.
FLOOD_SETTINGS = {**SETTINGS, "max_locks_per_transaction": "1024"}


@dataclass(frozen=True, slots=True)
class FloodCost:
    locks: int
    polls: int
    healthy_cpu_ms: float  # medians
    healthy_changed_cpu_ms: float  # a healthy poll, one lock taken anew before each
    steady_cpu_ms: float  # every lock past its budget, unchanged from poll to poll
    changed_cpu_ms: float  # the same, one lock taken anew before each poll
    findings: int  # of the steady flood's poll

    @property
    def steady_ratio(self) -> float:
        return self.steady_cpu_ms / self.healthy_cpu_ms

    @property
    def changed_ratio(self) -> float:
        return self.changed_cpu_ms / self.healthy_cpu_ms

    @property
    def changed_to_changed(self) -> float:
        """The changed flood against a healthy poll that changed as much."""
        return self.changed_cpu_ms / self.healthy_changed_cpu_ms


@dataclass(frozen=True, slots=True)
class FloodFootprint:
    locks: int
    polls: int
    rss_mb: float  # the most over the polls
    state_file_kb: float


def _cpu_ms(
    runner: TargetRunner, polls: int, between: Callable[[], object] = lambda: None
) -> tuple[float, int]:
    """Median CPU of ``polls`` polls after two unmeasured ones (``between``
    runs before each, unmeasured), and the findings of the last."""
    for _ in range(2):
        runner.poll_once()
    spent = []
    findings = 0
    for _ in range(polls):
        between()
        started = time.process_time()
        view = runner.poll_once()
        spent.append((time.process_time() - started) * 1000)
        findings = len(view.findings)
    return statistics.median(spent), findings


def measure_cpu(server: BenchServer, polls: int) -> FloodCost:
    """A healthy poll, a steady flood's and, each after a session took one
    more lock (the locks are not the same from poll to poll), a healthy
    poll's and a flood's, each by a runner of its own, under the garbage
    collector's settings of ``lockwatch run``."""
    settle_garbage_collector()
    churn = psycopg.connect(server.dsn(), autocommit=True, application_name="bench-churn")
    taken = itertools.count(server.locks_held + 1)

    def take() -> object:
        return churn.execute("SELECT pg_advisory_lock(%s)", (next(taken),))

    arms: list[tuple[str, LockSettings, Callable[[], object]]] = [
        ("healthy", HEALTHY, lambda: None),
        ("healthy changed", HEALTHY, take),
        ("steady", FLOODED, lambda: None),
        ("changed", FLOODED, take),
    ]
    cpu: dict[str, tuple[float, int]] = {}
    try:
        for name, locks, between in arms:
            target = Target(
                name.replace(" ", "-"),
                server.dsn(LOCKWATCH_ROLE),
                statement_timeout=60.0,
                locks=locks,
            )
            runner = TargetRunner(target, Board(), StateStore(None), lambda: datetime.now(UTC))
            try:
                cpu[name] = _cpu_ms(runner, polls, between)
            finally:
                runner.close()
    finally:
        churn.close()
    return FloodCost(
        server.locks_held,
        polls,
        cpu["healthy"][0],
        cpu["healthy changed"][0],
        cpu["steady"][0],
        cpu["changed"][0],
        cpu["steady"][1],
    )


def measure_daemon(server: BenchServer, workdir: Path) -> FloodFootprint:
    """A ``lockwatch run`` of its own, with its state dir, polled until it has
    polled DAEMON_POLLS times with every lock held."""
    port = free_port()
    dsn_file = workdir / "flood.dsn"
    dsn_file.write_text(server.dsn(LOCKWATCH_ROLE) + "\n")
    config = workdir / "flood.yml"
    config.write_text(
        f"listen: 127.0.0.1:{port}\nstate_dir: {workdir / 'state'}\ntargets:\n"
        f"  - name: flood\n    dsn_file: {dsn_file}\n    interval: {DAEMON_INTERVAL:g}s\n"
        "    statement_timeout: 60s\n    locks: {max_hold: 1ms, orphan_after: 24h}\n"
    )
    base = f"http://127.0.0.1:{port}"
    daemon = Process(
        [sys.executable, "-m", "lockwatch", "run", "-c", str(config)], workdir / "flood.log"
    )
    daemon.start_serving(f"{base}/healthz")
    rss = 0.0
    try:
        while True:
            daemon.check_alive()
            rss = max(rss, daemon.psutil.memory_info().rss / 2**20)
            polls = samples(http_get(f"{base}/metrics").text, "lockwatch_polls_total")
            if polls and polls[0] >= DAEMON_POLLS:
                break
            time.sleep(0.5)
    finally:
        daemon.stop()
    state = workdir / "state" / "target-flood.json"
    recent = state.with_name(state.name + ".recent")
    size = sum(path.stat().st_size for path in (state, recent) if path.exists())
    return FloodFootprint(server.locks_held, DAEMON_POLLS, rss, size / 1024)


def render(cost: FloodCost, footprint: FloodFootprint, command: str) -> str:
    met = "met" if cost.steady_ratio <= CPU_TARGET else "NOT met"
    changed_met = "met" if cost.changed_to_changed <= CPU_TARGET else "NOT met"
    return "\n".join(
        [
            "### A flood of findings",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d} with `{command}`: the CPU of one poll "
            "(`TargetRunner.poll_once()`, median of "
            f"{cost.polls}) with every lock past its budget, unchanged from poll to poll "
            "(steady) and with one lock taken anew before each poll (changed), next to a "
            "healthy poll of the same locks, unchanged and with one lock taken anew before "
            "each; the RSS of a `lockwatch run` (its state dir on) "
            f"over {footprint.polls} polls of {footprint.locks:,} locks past their budget. "
            f"Targets: a steady flood at most {CPU_TARGET:g}x a healthy poll ({met}: "
            f"{cost.steady_ratio:.1f}x), a changed flood at most {CPU_TARGET:g}x a healthy "
            f"poll that changed as much ({changed_met}: {cost.changed_to_changed:.1f}x), "
            f"RSS under {RSS_TARGET_MB:.0f} MB.",
            "",
            *table(
                [
                    "locks",
                    "healthy poll, CPU ms",
                    "healthy, one lock taken, CPU ms",
                    "steady flood, CPU ms",
                    "ratio",
                    "changed flood, CPU ms",
                    "ratio",
                    "to a healthy changed poll",
                    "findings",
                ],
                [
                    [
                        f"{cost.locks:,}",
                        ms(cost.healthy_cpu_ms),
                        ms(cost.healthy_changed_cpu_ms),
                        ms(cost.steady_cpu_ms),
                        f"{cost.steady_ratio:.1f}x",
                        ms(cost.changed_cpu_ms),
                        f"{cost.changed_ratio:.1f}x",
                        f"{cost.changed_to_changed:.1f}x",
                        str(cost.findings),
                    ]
                ],
            ),
            *table(
                ["locks", "lockwatch run RSS MB", "state file KiB"],
                [
                    [
                        f"{footprint.locks:,}",
                        f"{footprint.rss_mb:.0f}",
                        f"{footprint.state_file_kb:,.0f}",
                    ]
                ],
            ),
        ]
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flood", description=__doc__)
    parser.add_argument("--locks", type=int, default=LOCKS)
    parser.add_argument("--rss-locks", type=int, default=RSS_LOCKS)
    parser.add_argument("--polls", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="only print the tables")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="lockwatch-bench-flood-") as workdir,
        BenchServer(Path(workdir), settings=FLOOD_SETTINGS) as server,
    ):
        server.hold_locks(args.locks)
        cost = measure_cpu(server, args.polls)
        server.hold_locks(args.rss_locks)
        footprint = measure_daemon(server, Path(workdir))
    text = render(cost, footprint, " ".join(["python -m bench.flood", *argv]))
    print(text)
    if not args.no_write:
        write(text, begin=BEGIN, end=END)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
