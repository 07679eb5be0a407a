"""The benchmark's figures as markdown, and their place in docs/benchmarks.md."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bench import daemon
from bench.detection import GRACE, NOT_YET
from bench.impact_report import cell_section
from bench.markdown import ms, ratio, table, verdict
from bench.poll_cost import cost_section
from bench.run import Results
from bench.server import HOLDER_SESSIONS
from bench.server_parts import parts_section
from bench.versions import VersionCost

BEGIN = "<!-- begin: written by python -m bench -->"
END = "<!-- end: written by python -m bench -->"
VERSIONS_BEGIN = "<!-- begin: written by python -m bench --versions -->"
VERSIONS_END = "<!-- end: written by python -m bench --versions -->"


def exporter_section(results: Results) -> list[str]:
    costs = {c.locks: c for c in results.costs}
    footprints = {f.locks: f for f in results.footprints}
    rows = []
    for e in results.exporter:
        lockwatch_ms = costs[e.locks].poll_server_ms.median
        held = footprints[e.locks].held if e.locks in footprints else None
        rows.append(
            [
                f"{e.locks:,}",
                ms(e.server_ms),
                ms(lockwatch_ms),
                ratio(lockwatch_ms / e.server_ms),
                verdict(lockwatch_ms / e.server_ms, 1.0),
                ms(e.scrape_ms),
                str(e.series),
                "?"
                if e.exclusive_locks is None
                else f'`pg_locks_count{{mode="exclusivelock"}}` {e.exclusive_locks:,.0f}',
                "?"
                if held is None
                else f"{held:,.0f} held; per key: holder pid, application, state, hold time",
            ]
        )
    return [
        "### Against postgres_exporter",
        "",
        "Server time (pg_stat_statements) of everything postgres_exporter runs per scrape with "
        "its default collectors, and of lockwatch's poll, in the same rounds as above. "
        "Target: lockwatch costs the server no more.",
        "",
        *table(
            [
                "locks",
                "postgres_exporter, server ms",
                "lockwatch, server ms",
                "ratio",
                "no more",
                "exporter scrape ms",
                "exporter series",
                "postgres_exporter shows",
                "lockwatch shows",
            ],
            rows,
        ),
    ]


def footprint_section(results: Results) -> list[str]:
    return [
        "### Footprint of `lockwatch run`",
        "",
        "One target polled every "
        f"{results.options.interval:g} s; CPU (user + system, psutil) over "
        f"{results.options.daemon_polls} polls; /metrics as Prometheus would scrape it.",
        "",
        *table(
            ["locks", "CPU ms per poll", "RSS MiB", "/metrics ms", "/metrics bytes", "series"],
            (
                [
                    f"{f.locks:,}",
                    ms(f.cpu_ms_per_poll),
                    f"{f.rss_mib:.1f}",
                    ms(f.metrics_ms),
                    f"{f.metrics_bytes:,}",
                    str(f.series),
                ]
                for f in results.footprints
            ),
        ),
    ]


def documents_section(results: Results) -> list[str]:
    rows = [f.documents for f in results.footprints]
    if results.many is not None:
        rows.append(results.many)
    if not rows:
        return []
    return [
        "### What the documents cost",
        "",
        "Each document of a `lockwatch run` as a client fetches it: wall time (median of "
        f"{daemon.SCRAPES} requests), the daemon's CPU per request (psutil, its polls' share "
        "included) and size. The first rows are the footprint's one target at each number of "
        "locks; the last, when there is one, one daemon with many targets (the same database "
        f"under different names, polled every {results.options.many_interval:g} s), measured once "
        "every target had polled.",
        "",
        *table(
            [
                "locks",
                "targets",
                *(f"`{path}` ms, CPU ms, bytes" for path in daemon.PATHS),
            ],
            (
                [
                    f"{d.locks:,}",
                    str(d.targets),
                    *(
                        next(
                            (
                                f"{ms(c.ms)}, {ms(c.cpu_ms)}, {c.size:,}"
                                for c in d.costs
                                if c.path == path
                            ),
                            "not measured",
                        )
                        for path in daemon.PATHS
                    ),
                ]
                for d in rows
            ),
        ),
    ]


def detection_section(results: Results) -> list[str]:
    missing = ", ".join(f"{name} (`{kind.value}`)" for name, kind in NOT_YET)
    note = f"Not measured: {missing}; the daemon runs no detector for them yet." if missing else ""
    return [
        "### Detection time",
        "",
        "From the incident starting to its finding in `/api/v1/findings`, against a "
        f"`lockwatch run` polling every {results.options.interval:g} s. "
        f"Target: never more than threshold + one interval + {GRACE:g} s.",
        "",
        *table(
            ["incident", "finding", "threshold", "+ interval", "detected after", "on time"],
            (
                [
                    d.incident,
                    f"`{d.kind.value}`",
                    "none" if d.threshold_name is None else f"{d.threshold_name} {d.threshold:g} s",
                    f"{d.budget:g} s",
                    "not detected" if d.seconds is None else f"{d.seconds:.2f} s",
                    "yes"
                    if d.met
                    else "no"
                    if d.seconds is None
                    else f"no, {d.seconds - d.budget - GRACE:+.2f} s",
                ]
                for d in results.detections
            ),
        ),
        *([note, ""] if note else []),
    ]


def render(results: Results, command: str) -> str:
    minutes, seconds = divmod(round(results.seconds), 60)
    lines = [
        f"Measured {results.started:%Y-%m-%d} with `{command}` in {minutes}m{seconds:02d}s: "
        f"PostgreSQL {results.postgres}, {results.machine}.",
        "",
        *cost_section(results.costs),
        *parts_section(results.server_parts),
        *exporter_section(results),
        *footprint_section(results),
        *documents_section(results),
        *detection_section(results),
        *(cell_section(results.pgbench) if results.pgbench is not None else []),
    ]
    return "\n".join(lines).rstrip() + "\n"


def render_versions(costs: Sequence[VersionCost], command: str, started: datetime) -> str:
    """The ``--versions`` table: one row per PostgreSQL major."""
    polls = costs[0].polls if costs else 0
    locks = costs[0].locks if costs else 0
    lines = [
        f"Measured {started:%Y-%m-%d} with `{command}`.",
        "",
        "### Cost per poll on each PostgreSQL version",
        "",
        f"Milliseconds per poll with {locks:,} session advisory locks held on "
        f"{HOLDER_SESSIONS} idle sessions, over {polls} rounds, each version on its own "
        "server set up as above; client time is the median, server time the mean from "
        "pg_stat_statements, against the naive join (`bench/floor.sql`). Before 14 the join "
        "reads no `waitstart` (there is none).",
        "",
        *table(
            [
                "PostgreSQL",
                "naive join, client",
                "lockwatch poll, client",
                "of which the query",
                "ratio",
                "naive join, server",
                "lockwatch, server",
                "ratio",
            ],
            (
                [
                    c.version,
                    ms(c.floor_wall_ms),
                    ms(c.poll_wall_ms),
                    ms(c.query_wall_ms),
                    ratio(c.wall_ratio),
                    ms(c.floor_server_ms),
                    ms(c.poll_server_ms),
                    ratio(c.server_ratio),
                ]
                for c in costs
            ),
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"
