"""Where a lockwatch poll's server time goes: the floor, and what each piece
of lockwatch's two statements adds to it, measured in the same rounds.

A poll runs two statements: the locks (``advisory_locks.sql``: every advisory
lock of ``pg_locks`` as arrays in one row, and the rows of the locktypes some
session waits on) and the sessions behind them (``lock_sessions.sql``).
Between the floor (``SELECT count(*) FROM pg_locks``) and the lock statement
sit four steps that tell what costs what: the floor's rows filtered to
advisory locks, one array of their keys (the least any answer that names
each lock can send), two arrays of their holders' pids and keys (the least
an answer naming each lock's holder can send), and the advisory arrays alone (the lock statement as it
was before it read the waits on other locktypes: with no such waiter, the
lock statement should cost at most 5 % more). Beside the sessions statement,
the least any read of the holders' sessions costs: their pids alone from
``pg_stat_activity``. Every statement runs
prepared on one connection of a role of their own, in an order that turns
from round to round, and pg_stat_statements tells them apart by a trailing
comment that names each (it keeps the text a statement first came with; a
statement that differs only in its comment is counted as the first), so
each ratio to the floor is taken within one round.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.markdown import Spread, ms, ratio, spread, table
from bench.poll_cost import COUNT_SQL, WARMUP
from bench.server import PARTS_ROLE, BenchServer, holding, lock_sizes
from lockwatch.sample.activity import QUERY_CHARS
from lockwatch.sample.locks import advisory_locks_query, lock_sessions_query
from lockwatch.sample.session import WORK_MEM

ADVISORY = " FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory'"
KEYS = "(l.classid::pg_catalog.int8 << 32) | l.objid::pg_catalog.int8"
# The lock statement as it was before it read the waits on other locktypes
# (issue 26): the advisory arrays alone, which a poll with no such waiter
# must cost no more than 5 % over.
ADVISORY_ARRAYS_SQL = (
    "SELECT pg_catalog.statement_timestamp(), (SELECT pg_catalog.count(*)::pg_catalog.int4"
    " FROM pg_catalog.pg_stat_get_backend_idset() AS b(id)"
    " WHERE pg_catalog.pg_stat_get_backend_wait_event(b.id) IN ('LockManager', 'lock_manager')),"
    " pg_catalog.array_agg(COALESCE(l.pid, 0) * 8 + CASE WHEN l.objsubid = 2 THEN 1 ELSE 0 END"
    " + CASE WHEN l.mode = 'ShareLock' THEN 2 ELSE 0 END + CASE WHEN l.granted THEN 0 ELSE 4 END),"
    " pg_catalog.array_agg((l.classid::pg_catalog.int8 << 32) | l.objid::pg_catalog.int8),"
    " pg_catalog.array_agg(WAITSTART) FILTER (WHERE NOT l.granted),"
    " pg_catalog.array_agg(l.virtualtransaction) FILTER (WHERE l.pid IS NULL)"
    " FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory'"
)
# The least a read of the holders' sessions costs: their pids alone from
# pg_stat_activity (what every read of it pays: the copy of each backend's
# status), without the sessions statement's columns.
HOLDER_PIDS_SQL = (
    "SELECT a.pid FROM pg_catalog.pg_stat_activity AS a"
    " WHERE a.pid = ANY (%(pids)b::pg_catalog.int4[])"
)
# The parts, in the order they are shown; the last two are a poll's statements.
FLOOR, ROWS, ONE_ARRAY, TWO_ARRAYS, ADVISORY_ARRAYS, HOLDER_PIDS, LOCKS, SESSIONS = (
    "the floor",
    "advisory rows only",
    "one array (the keys)",
    "two arrays (holders and keys)",
    "the advisory arrays alone",
    "the holders' pids from pg_stat_activity",
    "lock statement",
    "sessions statement",
)
PARTS = (FLOOR, ROWS, ONE_ARRAY, TWO_ARRAYS, ADVISORY_ARRAYS, HOLDER_PIDS, LOCKS, SESSIONS)
# The parts that read the holders' sessions, given their pids.
OF_HOLDERS = (HOLDER_PIDS, SESSIONS)
POLL = "a poll (both statements)"
MARK = "\n-- bench part: "  # the trailing comment pg_stat_statements keeps


@dataclass(frozen=True, slots=True)
class ServerParts:
    locks: int
    rounds: int
    ms: dict[str, Spread]  # server ms of each part (and of a poll), per round
    ratio: dict[str, Spread]  # each to the floor of the same round
    # The lock statement to the advisory arrays alone of the same round: what
    # reading the waits on other locktypes costs a poll with no such waiter.
    waits_ratio: Spread


def _statements(server_version: int) -> dict[str, bytes]:
    bare = {
        FLOOR: COUNT_SQL.encode(),
        ROWS: f"SELECT pg_catalog.count(*){ADVISORY}".encode(),
        ONE_ARRAY: f"SELECT pg_catalog.array_agg({KEYS}){ADVISORY}".encode(),
        TWO_ARRAYS: (
            f"SELECT pg_catalog.array_agg(l.pid), pg_catalog.array_agg({KEYS}){ADVISORY}"
        ).encode(),
        ADVISORY_ARRAYS: ADVISORY_ARRAYS_SQL.replace(
            "WAITSTART", "l.waitstart" if server_version >= 140000 else "NULL::timestamptz"
        ).encode(),
        HOLDER_PIDS: HOLDER_PIDS_SQL.encode(),
        LOCKS: advisory_locks_query(server_version),
        SESSIONS: lock_sessions_query(server_version),
    }
    return {part: text + (MARK + part).encode() for part, text in bare.items()}


def _spent(server: BenchServer, marks: dict[str, str]) -> dict[str, float]:
    """Total server ms so far of each part, found by its trailing comment."""
    query = sql.SQL(
        "SELECT s.query, s.{} FROM pg_stat_statements AS s"
        " JOIN pg_catalog.pg_roles AS r ON r.oid = s.userid WHERE r.rolname = %s"
    ).format(server.exec_time)
    rows = server.admin.execute(query, (PARTS_ROLE,)).fetchall()
    found = {part: 0.0 for part in marks}
    for text, total in rows:
        for part, mark in marks.items():
            if str(text).endswith(mark):
                found[part] += float(total)
    return found


def measure_parts(server: BenchServer, rounds: int) -> ServerParts:
    """``rounds`` rounds of every part, on the locks ``server`` holds now."""
    with psycopg.connect(
        server.dsn(PARTS_ROLE), autocommit=True, options=f"-c work_mem={WORK_MEM}"
    ) as conn:
        statements = _statements(conn.info.server_version)
        holders = conn.execute(
            "SELECT array_agg(DISTINCT pid) FROM pg_catalog.pg_locks WHERE locktype = 'advisory'"
        ).fetchone()
        params: dict[str, Any] = {"pids": (holders or [None])[0] or [], "query_chars": QUERY_CHARS}
        marks = {part: MARK + part for part in PARTS}
        per_round: dict[str, list[float]] = {part: [] for part in (*PARTS, POLL)}
        for round_ in range(-WARMUP, rounds):
            turn = round_ % len(PARTS)
            order = PARTS[turn:] + PARTS[:turn]
            before = _spent(server, marks)
            for part in order:
                args = params if part in OF_HOLDERS else None
                conn.execute(statements[part], args, prepare=True, binary=True).fetchall()
            if round_ < 0:
                continue
            after = _spent(server, marks)
            for part in PARTS:
                per_round[part].append(after[part] - before[part])
            per_round[POLL].append(per_round[LOCKS][-1] + per_round[SESSIONS][-1])
    floor = per_round[FLOOR]
    alone = per_round[ADVISORY_ARRAYS]
    return ServerParts(
        locks=server.locks_held,
        rounds=rounds,
        ms={part: Spread.of(values) for part, values in per_round.items()},
        ratio={
            part: Spread.of([v / f for v, f in zip(values, floor, strict=True)])
            for part, values in per_round.items()
        },
        waits_ratio=Spread.of([v / a for v, a in zip(per_round[LOCKS], alone, strict=True)]),
    )


def parts_section(parts: Sequence[ServerParts]) -> list[str]:
    """Where a poll's server time goes (``bench.server_parts``)."""
    rounds = parts[0].rounds if parts else 0
    shown = (*PARTS[1:], POLL)
    return [
        "### Where a poll's server time goes",
        "",
        "Server time (pg_stat_statements) of the floor, of four steps towards lockwatch's "
        "lock statement (the floor's rows filtered to advisory locks; one array of their "
        "keys, the least an answer naming each lock can send; two arrays, their holders' "
        "pids and keys, the least an answer naming each lock's holder can send; the "
        "advisory arrays alone, "
        "the lock statement before it read the waits on other locktypes), of the least a read "
        "of the holders' sessions costs (their pids alone from pg_stat_activity), of "
        "lockwatch's two "
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


def main(argv: list[str]) -> None:
    """``python -m bench.server_parts``: only these rounds, printed (nothing is written)."""
    parser = argparse.ArgumentParser(prog="python -m bench.server_parts", description=__doc__)
    parser.add_argument(
        "--locks", type=lock_sizes, default=(100, 1_000, 10_000, 50_000), help="locks held"
    )
    parser.add_argument("--rounds", type=int, default=20, help="rounds at each N")
    args = parser.parse_args(argv)
    sizes = args.locks
    started, clock = datetime.now(UTC), time.monotonic()
    found: list[ServerParts] = []
    with (
        tempfile.TemporaryDirectory(prefix="lockwatch-bench-server-parts-") as workdir,
        BenchServer(Path(workdir)) as server,
    ):
        for _ in holding(server, sizes):
            found.append(measure_parts(server, args.rounds))
        version = server.version
    command = " ".join(["python -m bench.server_parts", *argv])
    print(
        f"Measured {started:%Y-%m-%d %H:%M} UTC with `{command}` in "
        f"{time.monotonic() - clock:.0f}s: PostgreSQL {version}.\n"
    )
    print("\n".join(parts_section(tuple(found))))


if __name__ == "__main__":
    main(sys.argv[1:])
