"""One lockwatch poll next to the floor and to a postgres_exporter scrape,
measured in turn in the same run.

The poll is ``TargetRunner.poll_once()`` in this process, exactly as the
daemon's poll thread runs it: the query, hold tracking, detection and the
board update. The floor is ``floor.sql`` (the bare ``pg_locks`` join) on its
own persistent connection, prepared, its rows fetched into Python in binary
(its fastest). Server time comes from pg_stat_statements, per role.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.exporter import ExporterCost, PostgresExporter, advisory_count
from bench.process import series_count
from bench.server import EXPORTER_ROLE, FLOOR_ROLE, LOCKWATCH_ROLE, ROLES, BenchServer
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore

FLOOR_SQL = (Path(__file__).parent / "floor.sql").read_text(encoding="utf-8")
# Budgets no lock of the run reaches: the cost of watching a healthy server,
# not of reporting thousands of findings.
QUIET = LockSettings(max_hold=86400.0, orphan_after=86400.0)
WARMUP = 2


@dataclass(frozen=True, slots=True)
class PollCost:
    locks: int
    polls: int
    floor_wall_ms: float  # medians
    poll_wall_ms: float
    query_wall_ms: float  # the part of the poll spent in the sampler
    floor_server_ms: float  # means, from pg_stat_statements
    poll_server_ms: float

    @property
    def wall_ratio(self) -> float:
        return self.poll_wall_ms / self.floor_wall_ms

    @property
    def server_ratio(self) -> float:
        return self.poll_server_ms / self.floor_server_ms


def bench_target(server: BenchServer, name: str = "bench", interval: float = 1.0) -> Target:
    return Target(name, server.dsn(LOCKWATCH_ROLE), interval=interval, locks=QUIET)


def measure(
    server: BenchServer, exporter: PostgresExporter, polls: int
) -> tuple[PollCost, ExporterCost]:
    """``polls`` rounds of a floor query, a lockwatch poll and a postgres_exporter
    scrape, one after the other, so that all three share the same moments."""
    runner = TargetRunner(
        bench_target(server), Board(), StateStore(None), lambda: datetime.now(UTC)
    )
    floor: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(
        server.dsn(FLOOR_ROLE), autocommit=True, application_name="floor"
    )
    floor_ms: list[float] = []
    poll_ms: list[float] = []
    query_ms: list[float] = []
    scrape_ms: list[float] = []
    scraped = ""
    try:
        # Connecting, preparing and the first sighting of every lock are
        # once-only costs; no party pays them inside the measurement.
        for _ in range(WARMUP):
            runner.poll_once()
            floor.execute(FLOOR_SQL, prepare=True, binary=True).fetchall()
            exporter.scrape()
        before = server.statement_totals()
        for _ in range(polls):
            started = time.perf_counter()
            floor.execute(FLOOR_SQL, prepare=True, binary=True).fetchall()
            floor_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            view = runner.poll_once()
            poll_ms.append((time.perf_counter() - started) * 1000)
            snapshot = None if view.status is None else view.status.snapshot
            if snapshot is None:
                raise RuntimeError(f"lockwatch could not poll the benchmark server: {view.status}")
            query_ms.append(snapshot.poll_seconds * 1000)
            seconds, scraped = exporter.scrape()
            scrape_ms.append(seconds * 1000)
        spent = server.spent_since(before)
        for role in ROLES:
            # Statements pg_stat_statements let go of would make a party look cheap.
            if spent[role].calls < polls:
                raise RuntimeError(
                    f"pg_stat_statements counted {spent[role].calls} statements of {role} "
                    f"in {polls} rounds"
                )
    finally:
        runner.close()
        floor.close()
    cost = PollCost(
        locks=server.locks_held,
        polls=polls,
        floor_wall_ms=statistics.median(floor_ms),
        poll_wall_ms=statistics.median(poll_ms),
        query_wall_ms=statistics.median(query_ms),
        floor_server_ms=spent[FLOOR_ROLE].exec_ms / polls,
        poll_server_ms=spent[LOCKWATCH_ROLE].exec_ms / polls,
    )
    return cost, ExporterCost(
        locks=server.locks_held,
        server_ms=spent[EXPORTER_ROLE].exec_ms / polls,
        scrape_ms=statistics.median(scrape_ms),
        series=series_count(scraped),
        exclusive_locks=advisory_count(scraped),
    )
