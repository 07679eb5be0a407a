"""The benchmark's figures as markdown, and their place in docs/benchmarks.md."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

from bench.detection import GRACE, NOT_YET
from bench.run import Results
from bench.server import HOLDER_SESSIONS
from bench.versions import VersionCost

WALL_TARGET = 1.3  # lockwatch's poll against the floor
BEGIN = "<!-- begin: written by python -m bench -->"
END = "<!-- end: written by python -m bench -->"
VERSIONS_BEGIN = "<!-- begin: written by python -m bench --versions -->"
VERSIONS_END = "<!-- end: written by python -m bench --versions -->"


def ms(value: float) -> str:
    """
    >>> ms(0.4567), ms(45.67), ms(456.7)
    ('0.46', '45.7', '457')
    """
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def verdict(value: float, limit: float) -> str:
    """
    >>> verdict(1.1, 1.3), verdict(1.56, 1.3)
    ('yes', 'no, +20%')
    """
    if value <= limit:
        return "yes"
    return f"no, +{(value / limit - 1) * 100:.0f}%"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return [*lines, ""]


def cost_section(results: Results) -> list[str]:
    return [
        "### Cost per poll against the floor",
        "",
        f"Milliseconds per poll with N session advisory locks held on {HOLDER_SESSIONS} idle "
        "sessions, "
        f"over {results.costs[0].polls if results.costs else 0} rounds; client time is the "
        "median, server time the mean from pg_stat_statements. "
        f"Target: lockwatch within {WALL_TARGET}x of the floor.",
        "",
        *table(
            [
                "locks",
                "floor, client",
                "lockwatch poll, client",
                "of which the query",
                "ratio",
                "floor, server",
                "lockwatch, server",
                "ratio",
                f"within {WALL_TARGET}x",
            ],
            (
                [
                    f"{c.locks:,}",
                    ms(c.floor_wall_ms),
                    ms(c.poll_wall_ms),
                    ms(c.query_wall_ms),
                    ratio(c.wall_ratio),
                    ms(c.floor_server_ms),
                    ms(c.poll_server_ms),
                    ratio(c.server_ratio),
                    verdict(max(c.wall_ratio, c.server_ratio), WALL_TARGET),
                ]
                for c in results.costs
            ),
        ),
    ]


def exporter_section(results: Results) -> list[str]:
    costs = {c.locks: c for c in results.costs}
    footprints = {f.locks: f for f in results.footprints}
    rows = []
    for e in results.exporter:
        lockwatch_ms = costs[e.locks].poll_server_ms
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
        *cost_section(results),
        *exporter_section(results),
        *footprint_section(results),
        *detection_section(results),
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
        "pg_stat_statements. Before 14 the floor reads no `waitstart` (there is none).",
        "",
        *table(
            [
                "PostgreSQL",
                "floor, client",
                "lockwatch poll, client",
                "of which the query",
                "ratio",
                "floor, server",
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


def write_into(path: Path, text: str, begin: str = BEGIN, end_marker: str = END) -> None:
    """Replace what lies between the markers in ``path``, keeping the prose around it."""
    block = f"{begin}\n{text}{end_marker}"
    try:
        document = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        document = ""
    start, end = document.find(begin), document.find(end_marker)
    if start < 0 or end < start:
        document = f"{document.rstrip()}\n\n{block}\n" if document.strip() else f"{block}\n"
    else:
        document = document[:start] + block + document[end + len(end_marker) :]
    path.write_text(document, encoding="utf-8")
