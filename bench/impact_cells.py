"""What a run of ``python -m bench.impact`` is made of and what it found:
the cells the arms are compared in, each arm's figures round by round, and
the run's options. Apart from the runner (bench/impact.py) so that the report
(bench/impact_report.py) reads them without importing the runner back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from bench import pgbench
from bench.machine import Load
from bench.waits import EVERY, LockWaits
from bench.watchers import ARMS, NONE

SETTLE = 1.0  # seconds between switching a monitor on and its window


@dataclass(frozen=True, slots=True)
class Cell:
    """One configuration the arms are compared in."""

    postgres: int
    workload: str
    clients: int
    locks: int
    max_locks: int


@dataclass(frozen=True, slots=True)
class ArmRound:
    """One arm in one round: pgbench's throughput and latencies (ms), the
    monitor's CPU and server time (ms per second of the window), the lock
    manager's waits, and the machine's load."""

    arm: str
    tps: float
    p50: float
    p99: float
    p999: float
    cpu_ms_per_s: float
    server_ms_per_s: float
    waits: LockWaits
    load: Load


@dataclass(frozen=True, slots=True)
class CellRun:
    cell: Cell
    version: str  # the server's
    arms: tuple[str, ...]
    rounds: tuple[tuple[ArmRound, ...], ...]  # each round's arms, in ``arms`` order
    seconds: float

    def of(self, arm: str) -> list[ArmRound]:
        index = self.arms.index(arm)
        return [arms[index] for arms in self.rounds]

    def ratios(self, arm: str, figure: str) -> list[float]:
        """An arm's figure over the no-monitor arm's, round by round."""
        return [
            float(getattr(mine, figure)) / float(getattr(base, figure))
            for mine, base in zip(self.of(arm), self.of(NONE), strict=True)
        ]


@dataclass(frozen=True, slots=True)
class Options:
    postgres: tuple[int, ...] = (15, 18)
    workloads: tuple[str, ...] = pgbench.WORKLOADS
    clients: tuple[int, ...] = (8, 64)
    locks: tuple[int, ...] = (0, 10_000)
    max_locks: tuple[int, ...] = (64, 1_024)
    arms: tuple[str, ...] = ARMS
    rounds: int = 16
    seconds: float = 5.0  # each arm's window
    scale: int = pgbench.SCALE
    settle: float = SETTLE
    every: float = EVERY  # between samples of pg_stat_activity

    @property
    def cells(self) -> int:
        return (
            len(self.postgres)
            * len(self.workloads)
            * len(self.clients)
            * len(self.locks)
            * len(self.max_locks)
        )

    def estimate(self) -> float:
        """Seconds the arms alone take (each server's setup comes on top)."""
        monitored = sum(1 for arm in self.arms if arm != NONE)
        per_round = len(self.arms) * (self.seconds + 0.5) + monitored * self.settle
        return self.cells * self.rounds * per_round


QUICK = Options(
    postgres=(18,),
    workloads=("tpcb-like",),
    clients=(8,),
    locks=(10_000,),
    max_locks=(64,),
    rounds=2,
    seconds=3.0,
)


@dataclass(frozen=True, slots=True)
class ImpactRun:
    options: Options
    started: datetime
    seconds: float
    cells: tuple[CellRun, ...] = field(default=())
