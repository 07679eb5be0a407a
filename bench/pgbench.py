"""What watching costs the database's own clients: pgbench on the same host
with 10,000 advisory locks held, in three arms alternated round by round (no
monitor, ``lockwatch run`` polling every second, postgres_exporter scraped
every second).

Both monitors run for the whole section; the one whose arm it is not is
stopped with SIGSTOP (lockwatch) or simply not scraped (postgres_exporter
does nothing between scrapes), so an arm's only difference is its monitor's
work. Latencies come from pgbench's per-transaction log.
"""

from __future__ import annotations

import math
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.daemon import LockwatchProcess, cpu_seconds, target_config
from bench.exporter import PostgresExporter
from bench.server import LOCKWATCH_ROLE, BenchServer

NONE, LOCKWATCH, EXPORTER = "no monitor", "lockwatch", "postgres_exporter"
ARMS = (NONE, LOCKWATCH, EXPORTER)
CLIENTS = 8
THREADS = 2
SCALE = 10
LOCKS = 10_000
SETTLE = 1.0  # seconds between starting an arm's monitor and its measurement


@dataclass(frozen=True, slots=True)
class ArmRound:
    """One arm in one round: pgbench's throughput and latencies (ms), and the
    monitor's CPU over it (ms per second of the run)."""

    arm: str
    tps: float
    p50: float
    p99: float
    p999: float
    monitor_cpu: float | None


@dataclass(frozen=True, slots=True)
class PgbenchRun:
    rounds: tuple[tuple[ArmRound, ...], ...]  # each round's arms, in ARMS order
    seconds: float
    locks: int
    arms: tuple[str, ...]


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least ``q`` of them at or below it.

    >>> quantile([float(n) for n in range(1, 1001)], 0.999)
    999.0
    """
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def pgbench_binary(server: BenchServer) -> str:
    return str(server.cluster.bin_dir / "pgbench")


def _dsn(server: BenchServer) -> str:
    return server.dsn()


def initialise(server: BenchServer) -> None:
    subprocess.run(
        [pgbench_binary(server), "-i", "-q", "-s", str(SCALE), _dsn(server)],
        check=True,
        capture_output=True,
    )


def run_pgbench(server: BenchServer, seconds: float, prefix: Path) -> tuple[float, list[float]]:
    """One pgbench run: its TPS and every transaction's latency in ms."""
    for old in prefix.parent.glob(prefix.name + "*"):
        old.unlink()
    done = subprocess.run(
        [
            pgbench_binary(server),
            "-n",
            "-c",
            str(CLIENTS),
            "-j",
            str(THREADS),
            "-T",
            str(round(seconds)),
            "-l",
            f"--log-prefix={prefix}",
            _dsn(server),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=prefix.parent,
    )
    tps = next(
        float(line.split("=")[1].split()[0])
        for line in done.stdout.splitlines()
        if line.startswith("tps =")
    )
    latencies = [
        int(line.split()[2]) / 1000
        for log in prefix.parent.glob(prefix.name + "*")
        for line in log.read_text().splitlines()
        if line
    ]
    return tps, latencies


@contextmanager
def scraping(exporter: PostgresExporter, every: float) -> Iterator[None]:
    """Scrape the exporter every ``every`` seconds, as Prometheus would."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            exporter.scrape()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _arm(
    arm: str,
    server: BenchServer,
    daemon: LockwatchProcess,
    exporter: PostgresExporter | None,
    seconds: float,
    prefix: Path,
    interval: float,
) -> ArmRound:
    watched = daemon if arm == LOCKWATCH else exporter if arm == EXPORTER else None
    if arm == LOCKWATCH:
        daemon.psutil.send_signal(signal.SIGCONT)
    try:
        time.sleep(SETTLE if arm != NONE else 0.0)
        cpu_before = cpu_seconds(watched) if watched is not None else 0.0
        if arm == EXPORTER and exporter is not None:
            with scraping(exporter, interval):
                tps, latencies = run_pgbench(server, seconds, prefix)
        else:
            tps, latencies = run_pgbench(server, seconds, prefix)
        cpu = None if watched is None else (cpu_seconds(watched) - cpu_before) * 1000 / seconds
    finally:
        if arm == LOCKWATCH:
            daemon.psutil.send_signal(signal.SIGSTOP)
    return ArmRound(
        arm,
        tps,
        quantile(latencies, 0.5),
        quantile(latencies, 0.99),
        quantile(latencies, 0.999),
        cpu,
    )


def measure(
    server: BenchServer,
    exporter: PostgresExporter | None,
    workdir: Path,
    rounds: int,
    seconds: float,
    interval: float = 1.0,
    say: Callable[[str], None] = lambda _: None,
) -> PgbenchRun:
    """``rounds`` rounds of every arm, the order turning from round to round."""
    say(f"  pgbench -i -s {SCALE}")
    initialise(server)
    server.release_locks()
    server.hold_locks(LOCKS)
    arms = ARMS if exporter is not None else ARMS[:2]
    target = target_config("bench", server.dsn(LOCKWATCH_ROLE), interval)
    results: list[tuple[ArmRound, ...]] = []
    logs = workdir / "pgbench"
    logs.mkdir(exist_ok=True)
    with LockwatchProcess([target], workdir, "pgbench-lockwatch") as daemon:
        daemon.wait_for_polls(2)
        daemon.psutil.send_signal(signal.SIGSTOP)
        try:
            for round_ in range(rounds):
                say(f"  round {round_ + 1} of {rounds}")
                order = [*arms[round_ % len(arms) :], *arms[: round_ % len(arms)]]
                done = {
                    arm: _arm(arm, server, daemon, exporter, seconds, logs / f"r{round_}", interval)
                    for arm in order
                }
                results.append(tuple(done[arm] for arm in arms))
        finally:
            daemon.psutil.send_signal(signal.SIGCONT)
    return PgbenchRun(tuple(results), seconds, server.locks_held, arms)


def ratios(run: PgbenchRun, arm: str, figure: str) -> list[float]:
    """An arm's figure over the no-monitor arm's, round by round."""
    index = run.arms.index(arm)
    return [
        float(getattr(arms[index], figure)) / float(getattr(arms[0], figure)) for arms in run.rounds
    ]


def median_of(run: PgbenchRun, arm: str, figure: str) -> float:
    index = run.arms.index(arm)
    return statistics.median(float(getattr(arms[index], figure)) for arms in run.rounds)
