"""``python -m bench.convoy``: the cost of one poll with one holder and N
sessions queued on one advisory key, and with N sessions queued behind one
``ALTER TABLE`` that waits behind an idle-in-transaction reader (the lock
queue), on a server of its own (max_connections raised, pg_stat_statements
on). Targets: under 0.5 s of server time at 2,000 waiters, growing at most
linearly; the lock queue polled under the default statement_timeout without
``target_down``, its ``lock_queue`` found. Written to docs/benchmarks.md
between its own markers."""

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
from lockwatch.model.findings import FindingKind
from lockwatch.runner import TargetRunner
from lockwatch.settings.locks import LockSettings
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.statefile import StateStore
from lockwatch.state.target_view import TargetView

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN = "<!-- begin: written by python -m bench.convoy -->"
END = "<!-- end: written by python -m bench.convoy -->"
WAITERS = (10, 100, 1_000, 2_000)
KEY = 42
ROLE = "lockwatch"
SERVER_TARGET_MS = 500.0  # at 2,000 waiters


ADVISORY = "advisory key"
ALTER = "ALTER TABLE"


@dataclass(frozen=True, slots=True)
class ConvoyCost:
    queue: str  # ADVISORY or ALTER: what the sessions queue on
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


def _waiting(view: TargetView, queue: str) -> int:
    snapshot = view.status.snapshot if view.status else None
    if snapshot is None:
        return -1
    if queue == ADVISORY:
        return sum(not lock.granted for lock in snapshot.locks)
    return len(snapshot.waits) - 1  # the ALTER itself waits too


def _polled(view: TargetView, queue: str) -> None:
    """A measured poll is what it claims: the target read, the queue found."""
    kinds = {finding.kind for finding in view.findings}
    if FindingKind.TARGET_DOWN in kinds:
        raise RuntimeError(f"target_down while {queue} waiters queued")
    if queue == ALTER and FindingKind.LOCK_QUEUE not in kinds:
        raise RuntimeError("no lock_queue for the sessions queued behind the ALTER")


def _queue_up(server: LocalCluster, queue: str, queued: list[psycopg.Connection[Any]]) -> None:
    """One more session queued, sent and not waited for."""
    conn = psycopg.connect(server.dsn(), autocommit=True)
    statement = f"SELECT pg_advisory_lock({KEY})" if queue == ADVISORY else "SELECT * FROM jobs"
    conn.pgconn.send_query(statement.encode())
    queued.append(conn)


def _measured(
    runner: TargetRunner, admin: psycopg.Connection[Any], queue: str, size: int, polls: int
) -> ConvoyCost:
    while _waiting(runner.poll_once(), queue) != size:  # every waiter queued, a warm-up poll
        pass
    before, walls = _server_ms(admin), []
    for _ in range(polls):
        started = time.perf_counter()
        view = runner.poll_once()
        walls.append((time.perf_counter() - started) * 1000)
        _polled(view, queue)
    spent = (_server_ms(admin) - before) / polls
    return ConvoyCost(queue, size, polls, statistics.median(walls), spent)


def measure(sizes: tuple[int, ...], polls: int, workdir: Path) -> list[ConvoyCost]:
    settings = {**SETTINGS, "max_connections": str(max(sizes) + 30), "deadlock_timeout": "1h"}
    costs = []
    with LocalCluster(bin_dir(None), base_dir=workdir, settings=settings) as server:
        admin = psycopg.connect(server.dsn(), autocommit=True)
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        admin.execute(f"CREATE ROLE {ROLE} LOGIN IN ROLE pg_monitor")
        admin.execute("CREATE TABLE jobs (id int PRIMARY KEY, state text)")
        try:
            for queue in (ADVISORY, ALTER):
                costs += _queue_costs(server, admin, queue, sizes, polls)
        finally:
            server.stop()
            admin.close()
    return costs


def _queue_costs(
    server: LocalCluster,
    admin: psycopg.Connection[Any],
    queue: str,
    sizes: tuple[int, ...],
    polls: int,
) -> list[ConvoyCost]:
    """The polls' cost with ``sizes`` sessions queued on ``queue`` in turn, under
    the default statement_timeout, its budgets passed at once."""
    holder = psycopg.connect(server.dsn(), autocommit=queue == ADVISORY)
    if queue == ADVISORY:
        holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
    else:
        holder.execute("SELECT count(*) FROM jobs")  # and stays idle in its transaction
    locks = LockSettings(max_hold=86400.0, orphan_after=86400.0, queue_wait=0.0)
    target = Target("convoy", server.dsn(user=ROLE), locks=locks)
    runner = TargetRunner(target, Board(), StateStore(None), lambda: datetime.now(UTC))
    queued: list[psycopg.Connection[Any]] = []
    costs = []
    try:
        if queue == ALTER:
            alter = psycopg.connect(server.dsn(), autocommit=True)
            alter.pgconn.send_query(b"ALTER TABLE jobs ADD COLUMN note text")
            queued.append(alter)
        for size in sorted(sizes):
            while len(queued) < size + (queue == ALTER):
                _queue_up(server, queue, queued)
            costs.append(_measured(runner, admin, queue, size, polls))
    finally:
        runner.close()
        holder.close()  # the ALTER goes through, and the queue with it
        for conn in queued:
            conn.close()
    return costs


def render(costs: list[ConvoyCost], command: str) -> str:
    last = costs[-1]
    return "\n".join(
        [
            "### A convoy on one key, and a lock queue behind one ALTER TABLE",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d} with `{command}`: one poll "
            "(`TargetRunner.poll_once()`, the default 5 s statement_timeout) with one holder "
            "and N sessions queued on one advisory key; then with a reader idle in "
            "transaction, an `ALTER TABLE` waiting behind it and N sessions queued behind "
            "the ALTER (each measured poll has its `lock_queue`, none a `target_down`); "
            f"client time the median of {last.polls} polls, server time the mean from "
            f"pg_stat_statements. Target: under {SERVER_TARGET_MS:.0f} ms of server time at "
            "2,000 waiters, at most linear.",
            "",
            *table(
                ["queued on", "waiters", "poll, client", "server", "server per waiter"],
                (
                    [
                        c.queue,
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
