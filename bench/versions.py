"""``python -m bench --versions``: the cost of one poll at 10,000 locks on every
supported PostgreSQL major, next to the floor on the same server.

Each major gets its own throwaway server (the embedded 18, Debian's 15, the
npm builds of 12, 13, 14, 16 and 17 that scripts/bootstrap installs), set up
as for the main run, and the same rounds as ``poll_cost`` without the
exporter: floor, poll, floor, poll...
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.poll_cost import FLOOR_SQL, WARMUP, PollCost, bench_target
from bench.server import JOIN_ROLE, LOCKWATCH_ROLE, BenchServer, StatementTotals
from lockwatch.runner import TargetRunner
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore

MAJORS = (12, 13, 14, 15, 16, 17, 18)
LOCKS = 10_000
POLLS = 10


@dataclass(frozen=True, slots=True)
class VersionCost(PollCost):
    """A poll's cost on one PostgreSQL major."""

    major: int
    version: str  # server_version, e.g. 12.22


def floor_sql(major: int) -> str:
    """The floor query as the server can run it: no waitstart before 14."""
    return FLOOR_SQL if major >= 14 else FLOOR_SQL.replace("l.waitstart", "NULL AS waitstart")


def _rounds(
    server: BenchServer, major: int, polls: int
) -> tuple[dict[str, list[float]], dict[str, StatementTotals]]:
    runner = TargetRunner(
        bench_target(server), Board(), StateStore(None), lambda: datetime.now(UTC)
    )
    floor: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(
        server.dsn(JOIN_ROLE), autocommit=True, application_name="floor"
    )
    query = floor_sql(major)
    times: dict[str, list[float]] = {"floor": [], "poll": [], "query": []}
    try:
        for _ in range(WARMUP):
            runner.poll_once()
            floor.execute(query, prepare=True, binary=True).fetchall()
        before = server.statement_totals()
        for _ in range(polls):
            started = time.perf_counter()
            floor.execute(query, prepare=True, binary=True).fetchall()
            times["floor"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            view = runner.poll_once()
            times["poll"].append((time.perf_counter() - started) * 1000)
            snapshot = None if view.status is None else view.status.snapshot
            if snapshot is None or len(snapshot.locks) != server.locks_held:
                raise RuntimeError(f"lockwatch could not poll PostgreSQL {major}: {view.status}")
            times["query"].append(snapshot.poll_seconds * 1000)
        spent = server.spent_since(before)
    finally:
        runner.close()
        floor.close()
    return times, spent


def measure(workdir: Path, major: int, locks: int = LOCKS, polls: int = POLLS) -> VersionCost:
    with BenchServer(workdir, major) as server:
        server.hold_locks(locks)
        times, spent = _rounds(server, major, polls)
        return VersionCost(
            major=major,
            version=server.version,
            locks=server.locks_held,
            polls=polls,
            floor_wall_ms=statistics.median(times["floor"]),
            poll_wall_ms=statistics.median(times["poll"]),
            query_wall_ms=statistics.median(times["query"]),
            floor_server_ms=spent[JOIN_ROLE].exec_ms / polls,
            poll_server_ms=spent[LOCKWATCH_ROLE].exec_ms / polls,
        )


def run(
    workdir: Path,
    majors: tuple[int, ...] = MAJORS,
    locks: int = LOCKS,
    polls: int = POLLS,
    say: Callable[[str], None] | None = None,
) -> tuple[VersionCost, ...]:
    tell = say or (lambda _: None)
    costs = []
    for major in majors:
        tell(f"PostgreSQL {major}: {locks:,} locks, {polls} rounds of floor and lockwatch poll")
        costs.append(measure(workdir, major, locks, polls))
    return tuple(costs)
