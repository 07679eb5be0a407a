"""The benchmark's own PostgreSQL: pg_stat_statements on, one role per party,
and idle sessions holding as many advisory locks as a measurement needs."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from lockwatch.demo.pgbinaries import debian_bin_dirs, embedded_bin_dir, npm_bin_dirs
from lockwatch.demo.pgcluster import LocalCluster

DATABASE = "bench"
HOLDER_SESSIONS = 20
# Every party's statements are told apart in pg_stat_statements by its role.
LOCKWATCH_ROLE = "lockwatch"
FLOOR_ROLE = "floor"  # SELECT count(*) FROM pg_locks: the physical floor
JOIN_ROLE = "naive_join"  # floor.sql: the naive pg_locks join
EXPORTER_ROLE = "postgres_exporter"
# bench.server_parts: the floor and lockwatch's statements again, as one role
# of their own (pg_stat_statements keys a statement by role and parse tree).
PARTS_ROLE = "poll_parts"
ROLES = (LOCKWATCH_ROLE, FLOOR_ROLE, JOIN_ROLE, EXPORTER_ROLE, PARTS_ROLE)

SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    # The shared lock table holds max_locks_per_transaction x (max_connections
    # + max_prepared_transactions) locks: 512 x 300 leaves room for 50,000
    # advisory locks and everything else.
    "max_locks_per_transaction": "512",
    # Room for 300 targets' sessions (bench/documents.py) beside the rest.
    "max_connections": "400",
}


EMBEDDED_MAJOR = 18


def bin_dir(postgres: int | None) -> Path:
    """The embedded server (None, 18), Debian's PostgreSQL ``postgres``, or the
    npm build that scripts/bootstrap installed into .pg/ (12, 13, 14, 16, 17)."""
    if postgres is None or postgres == EMBEDDED_MAJOR:
        return embedded_bin_dir()
    found = debian_bin_dirs().get(postgres) or npm_bin_dirs().get(postgres)
    if found is None:
        raise RuntimeError(
            f"PostgreSQL {postgres} is installed neither under /usr/lib/postgresql nor in "
            ".pg/ (scripts/bootstrap installs postgresql-15, and 12-17 from npm)"
        )
    return found


@dataclass(frozen=True, slots=True)
class StatementTotals:
    """What pg_stat_statements has counted for one role so far."""

    calls: int
    exec_ms: float

    def since(self, earlier: StatementTotals) -> StatementTotals:
        return StatementTotals(self.calls - earlier.calls, self.exec_ms - earlier.exec_ms)


class BenchServer:
    """A throwaway server set up for measuring; use as a context manager."""

    def __init__(
        self,
        base_dir: Path,
        postgres: int | None = None,
        settings: Mapping[str, str] = SETTINGS,
    ) -> None:
        self.settings = dict(settings)
        self.cluster = LocalCluster(bin_dir(postgres), base_dir=base_dir, settings=self.settings)
        self._admin: psycopg.Connection[tuple[Any, ...]] | None = None
        self._holders: list[psycopg.Connection[tuple[Any, ...]]] = []
        self.locks_held = 0

    def __enter__(self) -> BenchServer:
        self.cluster.start()
        try:
            self._admin = psycopg.connect(self.cluster.dsn(), autocommit=True)
            self._admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self._admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
            for role in ROLES:
                self._admin.execute(
                    sql.SQL("CREATE ROLE {} LOGIN IN ROLE pg_monitor").format(sql.Identifier(role))
                )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.release_locks()
        if self._admin is not None:
            self._admin.close()
        self.cluster.close()

    @property
    def version(self) -> str:
        row = self.admin.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    @property
    def admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._admin is None:
            raise RuntimeError("the benchmark server is not started")
        return self._admin

    def dsn(self, role: str = "postgres", **params: str) -> str:
        return self.cluster.dsn(dbname=DATABASE, user=role, **params)

    def hold_locks(self, total: int) -> None:
        """Grow the advisory locks held, spread over idle sessions, to ``total``."""
        if not self._holders:
            self._holders = [
                psycopg.connect(self.dsn(), autocommit=True, application_name=f"bench-holder-{n}")
                for n in range(HOLDER_SESSIONS)
            ]
        if total <= self.locks_held:
            return
        for n, conn in enumerate(self._holders):
            # Keys from 1: key 0 would look like a mistake in a report.
            keys = [k for k in range(self.locks_held + 1, total + 1) if k % HOLDER_SESSIONS == n]
            conn.execute(
                "SELECT count(pg_catalog.pg_advisory_lock(k)) FROM unnest(%s::bigint[]) AS k",
                (keys,),
            )
        self.locks_held = total

    def release_locks(self) -> None:
        for conn in self._holders:
            conn.close()
        self._holders = []
        self.locks_held = 0

    @property
    def exec_time(self) -> sql.Identifier:
        """pg_stat_statements' column of execution time: total_exec_time is
        PostgreSQL 13's name for 12's total_time."""
        return sql.Identifier(
            "total_exec_time" if self.cluster.major_version >= 13 else "total_time"
        )

    def statement_totals(self) -> Mapping[str, StatementTotals]:
        """pg_stat_statements' calls and execution time so far, per party's role."""
        query = sql.SQL(
            "SELECT r.rolname, coalesce(sum(s.calls), 0)::bigint,"
            " coalesce(sum(s.{}), 0)::float8"
            " FROM pg_catalog.pg_roles AS r"
            " LEFT JOIN pg_stat_statements AS s ON s.userid = r.oid"
            " WHERE r.rolname = ANY(%s) GROUP BY r.rolname"
        ).format(self.exec_time)
        rows = self.admin.execute(query, (list(ROLES),)).fetchall()
        return {name: StatementTotals(int(calls), float(ms)) for name, calls, ms in rows}

    def spent_since(self, before: Mapping[str, StatementTotals]) -> dict[str, StatementTotals]:
        """What each party's role ran since ``before`` (a ``statement_totals()``)."""
        return {role: now.since(before[role]) for role, now in self.statement_totals().items()}


def lock_sizes(text: str) -> tuple[int, ...]:
    """A ``--locks`` argument: numbers of locks, comma-separated (``1_000`` too)."""
    return tuple(int(part.replace("_", "")) for part in text.split(","))


def holding(server: BenchServer, sizes: Sequence[int]) -> Iterator[int]:
    """Each number of advisory locks in turn, held on ``server`` (and said on stderr)."""
    for locks in sizes:
        print(f"holding {locks:,} advisory locks", file=sys.stderr, flush=True)
        server.hold_locks(locks)
        yield locks
