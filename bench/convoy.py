"""``python -m bench.convoy``: the cost of one poll with one holder and N
sessions queued on one advisory key, on a server of its own (max_connections
raised, pg_stat_statements on). Target: under 0.5 s of server time at 2,000
waiters, growing at most linearly. Written to docs/benchmarks.md between its
own markers."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.markdown import ms, table
from bench.server import SETTINGS, bin_dir
from lockwatch.demo.pgcluster import LocalCluster
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN = "<!-- begin: written by python -m bench.convoy -->"
END = "<!-- end: written by python -m bench.convoy -->"
WAITERS = (10, 100, 1_000, 2_000)
KEY = 42
ROLE = "lockwatch"
SERVER_TARGET_MS = 500.0  # at 2,000 waiters


@dataclass(frozen=True, slots=True)
class ConvoyCost:
    waiters: int
    polls: int
    poll_wall_ms: float  # median
    server_ms: float  # mean per poll, pg_stat_statements

    @property
    def server_ms_per_waiter(self) -> float:
        return self.server_ms / self.waiters


def _server_ms(admin: psycopg.Connection[Any]) -> float:
    row = admin.execute(
        "SELECT coalesce(sum(s.total_exec_time), 0)::float8 FROM pg_stat_statements AS s"
        " JOIN pg_catalog.pg_roles AS r ON r.oid = s.userid WHERE r.rolname = %s",
        (ROLE,),
    ).fetchone()
    return float(row[0]) if row else 0.0


def _poll(runner: TargetRunner, waiters: int) -> bool:
    view = runner.poll_once()
    snapshot = view.status.snapshot if view.status else None
    return snapshot is not None and sum(not lock.granted for lock in snapshot.locks) == waiters


def measure(sizes: tuple[int, ...], polls: int, workdir: Path) -> list[ConvoyCost]:
    settings = {**SETTINGS, "max_connections": str(max(sizes) + 30), "deadlock_timeout": "1h"}
    costs = []
    with LocalCluster(bin_dir(None), base_dir=workdir, settings=settings) as server:
        admin = psycopg.connect(server.dsn(), autocommit=True)
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        admin.execute(f"CREATE ROLE {ROLE} LOGIN IN ROLE pg_monitor")
        admin.execute("SELECT pg_advisory_lock(%s)", (KEY,))
        target = Target(
            "convoy",
            server.dsn(user=ROLE),
            statement_timeout=60.0,
            locks=LockSettings(max_hold=86400.0, orphan_after=86400.0),
        )
        runner = TargetRunner(target, Board(), StateStore(None), lambda: datetime.now(UTC))
        queued: list[psycopg.Connection[Any]] = []
        try:
            for size in sorted(sizes):
                while len(queued) < size:
                    conn = psycopg.connect(server.dsn(), autocommit=True)
                    conn.pgconn.send_query(f"SELECT pg_advisory_lock({KEY})".encode())
                    queued.append(conn)
                while not _poll(runner, size):  # every waiter queued, and a warm-up poll
                    pass
                before, walls = _server_ms(admin), []
                for _ in range(polls):
                    started = time.perf_counter()
                    runner.poll_once()
                    walls.append((time.perf_counter() - started) * 1000)
                spent = (_server_ms(admin) - before) / polls
                costs.append(ConvoyCost(size, polls, statistics.median(walls), spent))
        finally:
            runner.close()
            server.stop()
            for conn in queued:
                conn.close()
            admin.close()
    return costs


def render(costs: list[ConvoyCost], command: str) -> str:
    last = costs[-1]
    return "\n".join(
        [
            "### A convoy on one key",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d} with `{command}`: one poll "
            "(`TargetRunner.poll_once()`) with one holder and N sessions queued on one "
            f"advisory key; client time the median of {last.polls} polls, server time the "
            "mean from pg_stat_statements. Target: under "
            f"{SERVER_TARGET_MS:.0f} ms of server time at 2,000 waiters, at most linear.",
            "",
            *table(
                ["waiters", "poll, client", "server", "server per waiter"],
                (
                    [
                        f"{c.waiters:,}",
                        ms(c.poll_wall_ms),
                        ms(c.server_ms),
                        f"{c.server_ms_per_waiter * 1000:.0f} µs",
                    ]
                    for c in costs
                ),
            ),
        ]
    )


def write(text: str, path: Path = DOC, *, begin: str = BEGIN, end: str = END) -> None:
    """``text`` between the markers ``begin`` and ``end`` of docs/benchmarks.md
    (at its end the first time)."""
    document = path.read_text(encoding="utf-8")
    start, stop = document.find(begin), document.find(end)
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if start < 0 or stop < start:
        document = f"{document.rstrip()}\n\n{block}\n"
    else:
        document = document[:start] + block + document[stop + len(end) :]
    path.write_text(document, encoding="utf-8")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.convoy", description=__doc__)
    parser.add_argument("--waiters", default=",".join(map(str, WAITERS)))
    parser.add_argument("--polls", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="only print the table")
    args = parser.parse_args(argv)
    sizes = tuple(int(n) for n in args.waiters.split(","))
    with tempfile.TemporaryDirectory(prefix="lockwatch-bench-convoy-") as workdir:
        costs = measure(sizes, args.polls, Path(workdir))
    text = render(costs, " ".join(["python -m bench.convoy", *argv])).strip()
    print(text)
    if not args.no_write:
        write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
