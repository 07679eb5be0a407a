"""pgbench as the watched database's own clients: its tables, one timed run of
a built-in workload, and every transaction's latency from its log; and
pgbench again as the smallest client there is, replaying one statement on a
fixed period with no work of its own between them."""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.process import Process
from bench.server import BenchServer
from lockwatch.sample.session import WORK_MEM

SCALE = 10
THREADS = 2
WORKLOADS = ("select-only", "tpcb-like")
# What pgbench's clients call themselves, so pg_stat_activity tells them apart.
CLIENTS_APPLICATION = "bench-clients"


@dataclass(frozen=True, slots=True)
class PgbenchRun:
    """One run of a workload: its throughput and every transaction's latency (ms)."""

    tps: float
    latencies: list[float]

    def quantile(self, q: float) -> float:
        return quantile(self.latencies, q)


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least ``q`` of them at or below it.

    >>> quantile([float(n) for n in range(1, 1001)], 0.999)
    999.0
    """
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def pgbench_binary(server: BenchServer) -> str:
    return str(server.cluster.bin_dir / "pgbench")


def initialise(server: BenchServer, scale: int = SCALE) -> None:
    subprocess.run(
        [pgbench_binary(server), "-i", "-q", "-s", str(scale), server.dsn()],
        check=True,
        capture_output=True,
    )


def run_pgbench(
    server: BenchServer, workload: str, clients: int, seconds: float, prefix: Path
) -> PgbenchRun:
    """``clients`` clients running the built-in ``workload`` for ``seconds``."""
    for old in prefix.parent.glob(prefix.name + "*"):
        old.unlink()
    done = subprocess.run(
        [
            pgbench_binary(server),
            *("-n", "-b", workload, "-c", str(clients), "-j", str(min(THREADS, clients))),
            *("-T", str(max(1, round(seconds))), "-l", f"--log-prefix={prefix}"),
            server.dsn(application_name=CLIENTS_APPLICATION),
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
    for log in prefix.parent.glob(prefix.name + "*"):
        log.unlink()
    return PgbenchRun(tps, latencies)


class Replay(Process):
    """pgbench running ``statement`` on one connection as ``role``, then
    sleeping ``every`` seconds, until stopped: a monitor's SQL with no client
    work around it. Prepared, with the work_mem lockwatch's session sets."""

    def __init__(
        self,
        server: BenchServer,
        role: str,
        statement: str,
        every: float,
        workdir: Path,
        application: str,
    ) -> None:
        script = workdir / f"replay-{application}.sql"
        script.write_text(f"{statement.strip().rstrip(';')};\n\\sleep {round(every * 1000)} ms\n")
        super().__init__(
            [
                pgbench_binary(server),
                *("-n", "-M", "prepared", "-c", "1", "-T", "86400", "-f", str(script)),
                server.dsn(role, application_name=application, options=f"-c work_mem={WORK_MEM}"),
            ],
            workdir / f"replay-{application}.log",
        )
