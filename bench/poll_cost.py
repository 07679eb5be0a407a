"""One lockwatch poll next to the floor, the naive join and a
postgres_exporter scrape, measured in turn in the same rounds.

The poll is ``TargetRunner.poll_once()`` in this process, exactly as the
daemon's poll thread runs it: the query, hold tracking, detection and the
board update. The floor is ``SELECT count(*) FROM pg_locks``: it pays the
copy of the lock table that every query on ``pg_locks`` pays, and nothing
else. The naive join is ``floor.sql`` (every advisory lock joined with its
session, the columns lockwatch reads), rows fetched in binary. Each runs on
its own persistent connection, prepared. Server time comes from
pg_stat_statements, per role, read between the parties of each round.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.exporter import ExporterCost, PostgresExporter, advisory_count
from bench.machine import describe
from bench.markdown import Spread, ms, ratio, spread, table, verdict
from bench.process import series_count
from bench.server import (
    EXPORTER_ROLE,
    FLOOR_ROLE,
    HOLDER_SESSIONS,
    JOIN_ROLE,
    LOCKWATCH_ROLE,
    ROLES,
    BenchServer,
    holding,
    lock_sizes,
)
from lockwatch.daemon import settle_garbage_collector
from lockwatch.monitors import locks as lock_monitor
from lockwatch.runner import TargetRunner
from lockwatch.sample.session import WORK_MEM
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore

FLOOR_SQL = (Path(__file__).parent / "floor.sql").read_text(encoding="utf-8")
COUNT_SQL = "SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks"
# Budgets no lock of the run reaches: the cost of watching a healthy server,
# not of reporting thousands of findings.
QUIET = LockSettings(max_hold=86400.0, orphan_after=86400.0)
WARMUP = 2
LOCKS = (100, 1_000, 10_000, 50_000)  # held, one size after another
POLLS = 20  # rounds of floor, poll and scrape at each number of locks
CHANGED_POLLS = 5  # polls after a change, at each N (they go lock by lock)
CHURN_KEY = 10**12  # the changing lock's keys, far from the held ones


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


@dataclass(frozen=True, slots=True)
class FloorCost:
    """A poll against the floor and the naive join, round by round."""

    locks: int
    polls: int
    floor_ms: Spread  # client wall time
    join_ms: Spread
    poll_ms: Spread
    floor_server_ms: Spread  # from pg_stat_statements, per round
    join_server_ms: Spread
    poll_server_ms: Spread
    # Ratios of lockwatch to the floor (and the join) within each round.
    client_ratio: Spread
    client_join_ratio: Spread
    server_ratio: Spread
    server_join_ratio: Spread
    # lockwatch's CPU per poll (this process, time.process_time), and its parts.
    cpu_ms: Spread
    split_ms: dict[str, float]  # medians: sample, hold tracking, detect, the rest
    # lockwatch's CPU for a poll after one lock was let go and another taken,
    # and the cyclic GC's share of it.
    changed_cpu_ms: Spread
    changed_gc_ms: Spread


SPLIT = ("sample", "hold tracking", "detect", "ledger, incidents, publish")
GC = "of which the GC"


class CpuSplit:
    """Where a poll's CPU goes: the lock monitor's reader, hold tracker and
    detectors timed with time.process_time (the sampler's share includes
    psycopg's decoding of the answer); the rest of the poll is the ledger,
    incidents, the other monitors and the board."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = dict.fromkeys(SPLIT, 0.0)
        self.collecting = 0.0  # the cyclic GC's CPU during the poll, inside the parts
        self._gc_started = 0.0

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.process_time()
        else:
            self.collecting += time.process_time() - self._gc_started

    def timed(self, part: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent[part] += time.process_time() - started

        return run

    @contextmanager
    def watching(self, runner: TargetRunner) -> Iterator[None]:
        monitor = runner.lock_monitor
        reader, tracker = monitor.reader, monitor.tracker
        detect = getattr(lock_monitor, "detect_locks")  # noqa: B009 (not re-exported)
        reader.read = self.timed("sample", reader.read)  # type: ignore[method-assign]
        tracker.observe = self.timed("hold tracking", tracker.observe)  # type: ignore[method-assign]
        setattr(lock_monitor, "detect_locks", self.timed("detect", detect))  # noqa: B010
        gc.callbacks.append(self._gc)
        try:
            yield
        finally:
            gc.callbacks.remove(self._gc)
            del reader.read, tracker.observe
            setattr(lock_monitor, "detect_locks", detect)  # noqa: B010

    def poll(self, runner: TargetRunner) -> tuple[float, float, dict[str, float]]:
        """One poll: its wall and CPU milliseconds, and the CPU of each part."""
        self.spent, self.collecting = dict.fromkeys(SPLIT, 0.0), 0.0
        started, cpu = time.perf_counter(), time.process_time()
        view = runner.poll_once()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        if view.status is None or view.status.snapshot is None:
            raise RuntimeError(f"lockwatch could not poll the benchmark server: {view.status}")
        parts = {part: spent * 1000 for part, spent in self.spent.items()}
        parts[SPLIT[-1]] = max(cpu * 1000 - sum(parts.values()), 0.0)
        parts[GC] = self.collecting * 1000
        return wall * 1000, cpu * 1000, parts


def _changed_polls(
    server: BenchServer, runner: TargetRunner, split: CpuSplit
) -> list[tuple[float, float]]:
    """lockwatch's CPU ms, and the GC's, for polls each after one lock
    changed: a session of its own lets go of the key it held and takes the
    next one."""
    with psycopg.connect(server.dsn(), autocommit=True, application_name="bench-churn") as churn:
        churn.execute("SELECT pg_catalog.pg_advisory_lock(%s)", (CHURN_KEY,))
        split.poll(runner)  # the churning session's first sighting
        cpu = []
        for n in range(1, CHANGED_POLLS + 1):
            churn.execute(
                "SELECT pg_catalog.pg_advisory_unlock(%s), pg_catalog.pg_advisory_lock(%s)",
                (CHURN_KEY + n - 1, CHURN_KEY + n),
            )
            _, spent, parts = split.poll(runner)
            cpu.append((spent, parts[GC]))
    runner.poll_once()  # the churning session gone, as the next rounds expect
    return cpu


def _timed_query(conn: psycopg.Connection[tuple[Any, ...]], query: str) -> float:
    started = time.perf_counter()
    conn.execute(query, prepare=True, binary=True).fetchall()
    return (time.perf_counter() - started) * 1000


def measure(
    server: BenchServer, exporter: PostgresExporter, polls: int
) -> tuple[FloorCost, ExporterCost]:
    """``polls`` rounds of the floor, the naive join, a lockwatch poll and a
    postgres_exporter scrape, the first three in an order that turns each
    round, so that all share the same moments and none always goes first."""
    runner = TargetRunner(
        bench_target(server), Board(), StateStore(None), lambda: datetime.now(UTC)
    )
    # The floor and the join get the work_mem lockwatch's session sets: under
    # the default 4 MB the copy of 50,000 locks spills to a temp file, a cost
    # no floor need pay.
    conns: dict[str, psycopg.Connection[tuple[Any, ...]]] = {
        role: psycopg.connect(
            server.dsn(role),
            autocommit=True,
            application_name=role,
            options=f"-c work_mem={WORK_MEM}",
        )
        for role in (FLOOR_ROLE, JOIN_ROLE)
    }
    queries = {FLOOR_ROLE: COUNT_SQL, JOIN_ROLE: FLOOR_SQL}
    # The garbage collector as the daemon sets it before its first poll.
    settle_garbage_collector()
    split = CpuSplit()
    wall: dict[str, list[float]] = {role: [] for role in ROLES}
    spent: dict[str, list[float]] = {role: [] for role in ROLES}
    cpu: list[float] = []
    parts: dict[str, list[float]] = {part: [] for part in (*SPLIT, GC)}
    scraped = ""
    try:
        # Connecting, preparing and the first sighting of every lock are
        # once-only costs; no party pays them inside the measurement.
        for _ in range(WARMUP):
            runner.poll_once()
            for role, conn in conns.items():
                _timed_query(conn, queries[role])
            exporter.scrape()
        parties = [FLOOR_ROLE, JOIN_ROLE, LOCKWATCH_ROLE]
        with split.watching(runner):
            for round_ in range(polls):
                order = parties[round_ % 3 :] + parties[: round_ % 3]
                for role in [*order, EXPORTER_ROLE]:
                    before = server.statement_totals()
                    if role == LOCKWATCH_ROLE:
                        poll_wall, poll_cpu, poll_parts = split.poll(runner)
                        wall[role].append(poll_wall)
                        cpu.append(poll_cpu)
                        for part, value in poll_parts.items():
                            parts[part].append(value)
                    elif role == EXPORTER_ROLE:
                        seconds, scraped = exporter.scrape()
                        wall[role].append(seconds * 1000)
                    else:
                        wall[role].append(_timed_query(conns[role], queries[role]))
                    after = server.spent_since(before)[role]
                    # Statements pg_stat_statements let go of would make a party look cheap.
                    if after.calls < 1:
                        raise RuntimeError(f"pg_stat_statements counted nothing of {role}")
                    spent[role].append(after.exec_ms)
        changed = _changed_polls(server, runner, split)
    finally:
        runner.close()
        for conn in conns.values():
            conn.close()

    def ratios(values: dict[str, list[float]], base: str) -> Spread:
        return Spread.of(
            [
                ours / theirs
                for ours, theirs in zip(values[LOCKWATCH_ROLE], values[base], strict=True)
            ]
        )

    cost = FloorCost(
        locks=server.locks_held,
        polls=polls,
        floor_ms=Spread.of(wall[FLOOR_ROLE]),
        join_ms=Spread.of(wall[JOIN_ROLE]),
        poll_ms=Spread.of(wall[LOCKWATCH_ROLE]),
        floor_server_ms=Spread.of(spent[FLOOR_ROLE]),
        join_server_ms=Spread.of(spent[JOIN_ROLE]),
        poll_server_ms=Spread.of(spent[LOCKWATCH_ROLE]),
        client_ratio=ratios(wall, FLOOR_ROLE),
        client_join_ratio=ratios(wall, JOIN_ROLE),
        server_ratio=ratios(spent, FLOOR_ROLE),
        server_join_ratio=ratios(spent, JOIN_ROLE),
        cpu_ms=Spread.of(cpu),
        split_ms={part: statistics.median(values) for part, values in parts.items()},
        changed_cpu_ms=Spread.of([spent for spent, _ in changed]),
        changed_gc_ms=Spread.of([collecting for _, collecting in changed]),
    )
    return cost, ExporterCost(
        locks=server.locks_held,
        server_ms=statistics.mean(spent[EXPORTER_ROLE]),
        scrape_ms=statistics.median(wall[EXPORTER_ROLE]),
        series=series_count(scraped),
        exclusive_locks=advisory_count(scraped),
    )


SERVER_TARGET = 1.3  # lockwatch's server time against the floor, at every N
CLIENT_TARGET = 2.0  # its client time against the floor, from CLIENT_FROM locks up
CLIENT_FROM = 1_000


def floor_verdict(cost: FloorCost) -> str:
    server = verdict(cost.server_ratio.median, SERVER_TARGET)
    if cost.locks < CLIENT_FROM:
        return f"server {server}"
    return f"server {server}, client {verdict(cost.client_ratio.median, CLIENT_TARGET)}"


def cost_section(costs: Sequence[FloorCost]) -> list[str]:
    return [
        "### Cost per poll against the floor",
        "",
        f"Milliseconds per poll with N session advisory locks held on {HOLDER_SESSIONS} idle "
        f"sessions, over {costs[0].polls if costs else 0} rounds. The floor counts "
        "the rows of `pg_locks` (`count(*)`: the copy of the lock table every query on it pays), "
        "the naive join is [`bench/floor.sql`](../bench/floor.sql); each round runs the "
        "three in turn (the order turning from round to round) and reads pg_stat_statements "
        "between them. Ratios are taken within each round: median [min-max]. Client time is "
        "the wall time of the query or poll as its caller sees it. Targets: server within "
        f"{SERVER_TARGET}x of the floor at every N, client within {CLIENT_TARGET}x from "
        f"{CLIENT_FROM:,} locks up.",
        "",
        *table(
            [
                "locks",
                "floor, client",
                "naive join, client",
                "lockwatch, client",
                "client / floor",
                "client / join",
                "floor, server",
                "naive join, server",
                "lockwatch, server",
                "server / floor",
                "server / join",
                "targets met",
            ],
            (
                [
                    f"{c.locks:,}",
                    ms(c.floor_ms.median),
                    ms(c.join_ms.median),
                    ms(c.poll_ms.median),
                    spread(c.client_ratio, ratio),
                    spread(c.client_join_ratio, ratio),
                    ms(c.floor_server_ms.median),
                    ms(c.join_server_ms.median),
                    ms(c.poll_server_ms.median),
                    spread(c.server_ratio, ratio),
                    spread(c.server_join_ratio, ratio),
                    floor_verdict(c),
                ]
                for c in costs
            ),
        ),
        "### Where a poll's CPU goes",
        "",
        "lockwatch's own CPU per poll (this process, `time.process_time`), median [min-max] "
        "over the same rounds, and the median of each part: the sampler (psycopg decoding "
        "the answer, comparing it with the last one), hold tracking, the lock detectors, and "
        "the rest of the poll (ledger, incidents, the other monitors, the board); the "
        "cyclic garbage collector's share of all of them (gc.callbacks); last, the CPU of "
        f"{CHANGED_POLLS} polls each after one lock changed (a session of its own let go of "
        "a key and took another), and the GC's share of those. The GC as the daemon sets it "
        "(`daemon.settle_garbage_collector`).",
        "",
        *table(
            ["locks", "CPU ms per poll", *SPLIT, GC, "CPU ms, one lock changed", "of which the GC"],
            (
                [
                    f"{c.locks:,}",
                    spread(c.cpu_ms),
                    *(ms(c.split_ms[p]) for p in (*SPLIT, GC)),
                    spread(c.changed_cpu_ms),
                    ms(c.changed_gc_ms.median),
                ]
                for c in costs
            ),
        ),
    ]


def main(argv: list[str]) -> None:
    """``python -m bench.poll_cost``: only these rounds, on a server of their
    own, printed as ``python -m bench`` renders them (nothing is written)."""
    parser = argparse.ArgumentParser(prog="python -m bench.poll_cost", description=__doc__)
    parser.add_argument(
        "--locks",
        type=lock_sizes,
        default=LOCKS,
        help="advisory locks held, e.g. 100,1000,10000,50000",
    )
    parser.add_argument("--polls", type=int, default=POLLS, help="rounds at each N")
    args = parser.parse_args(argv)
    sizes = args.locks
    started, clock = datetime.now(UTC), time.monotonic()
    costs: list[FloorCost] = []
    with (
        tempfile.TemporaryDirectory(prefix="lockwatch-bench-poll-cost-") as workdir,
        BenchServer(Path(workdir)) as server,
        PostgresExporter(server, Path(workdir)) as exporter,
    ):
        version = server.version
        for _ in holding(server, sizes):
            costs.append(measure(server, exporter, args.polls)[0])
    seconds = time.monotonic() - clock
    command = " ".join(["python -m bench.poll_cost", *argv])
    print(
        f"Measured {started:%Y-%m-%d %H:%M} UTC with `{command}` in {seconds:.0f}s: "
        f"PostgreSQL {version}, {describe()}.\n"
    )
    print("\n".join(cost_section(costs)))


if __name__ == "__main__":
    main(sys.argv[1:])
