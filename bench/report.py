"""The benchmark's figures as markdown, and their place in docs/benchmarks.md."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bench import daemon
from bench.detection import GRACE, NOT_YET
from bench.impact_report import cell_section
from bench.markdown import ms, ratio, spread, table, verdict
from bench.poll_cost import CHANGED_POLLS, GC, SPLIT, FloorCost
from bench.run import Results
from bench.server import HOLDER_SESSIONS
from bench.server_parts import FLOOR, PARTS, POLL, ServerParts
from bench.versions import VersionCost

BEGIN = "<!-- begin: written by python -m bench -->"
END = "<!-- end: written by python -m bench -->"
VERSIONS_BEGIN = "<!-- begin: written by python -m bench --versions -->"
VERSIONS_END = "<!-- end: written by python -m bench --versions -->"


SERVER_TARGET = 1.3  # lockwatch's server time against the floor, at every N
CLIENT_TARGET = 2.0  # its client time against the floor, from CLIENT_FROM locks up
CLIENT_FROM = 1_000


def floor_verdict(cost: FloorCost) -> str:
    server = verdict(cost.server_ratio.median, SERVER_TARGET)
    if cost.locks < CLIENT_FROM:
        return f"server {server}"
    return f"server {server}, client {verdict(cost.client_ratio.median, CLIENT_TARGET)}"


def cost_section(results: Results) -> list[str]:
    costs = results.costs
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


def parts_section(parts: Sequence[ServerParts]) -> list[str]:
    """Where a poll's server time goes (``bench.server_parts``)."""
    rounds = parts[0].rounds if parts else 0
    shown = (*PARTS[1:], POLL)
    return [
        "### Where a poll's server time goes",
        "",
        "Server time (pg_stat_statements) of the floor, of three steps towards lockwatch's "
        "lock statement (the floor's rows filtered to advisory locks; one array of their "
        "keys, the least an answer naming each lock can send; the advisory arrays alone, "
        "the lock statement before it read the waits on other locktypes), of lockwatch's two "
        "statements, and of both, on one connection, in an order that turns from round to "
        f"round: ms, and the ratio to the floor of the same round, median [min-max] over "
        f"{rounds} rounds.",
        "",
        *table(
            ["locks", "the floor, ms", *shown],
            (
                [
                    f"{p.locks:,}",
                    ms(p.ms[FLOOR].median),
                    *(f"{ms(p.ms[part].median)}, {spread(p.ratio[part], ratio)}" for part in shown),
                ]
                for p in parts
            ),
        ),
        "",
        "The lock statement over the advisory arrays alone, round by round (what reading "
        "the waits on other locktypes costs a poll with no such waiter; target at most "
        "1.05x): "
        + "; ".join(f"{p.locks:,} locks {spread(p.waits_ratio, ratio)}" for p in parts)
        + ".",
    ]


def render(results: Results, command: str) -> str:
    minutes, seconds = divmod(round(results.seconds), 60)
    lines = [
        f"Measured {results.started:%Y-%m-%d} with `{command}` in {minutes}m{seconds:02d}s: "
        f"PostgreSQL {results.postgres}, {results.machine}.",
        "",
        *cost_section(results),
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
