"""Reads advisory locks and the sessions behind them from one PostgreSQL server.

The only code that talks to a monitored database. It keeps one read-only
connection per target, takes no locks of its own, and needs no more than the
``pg_monitor`` role.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format
from psycopg.rows import dict_row

from lockwatch.model.locks import AdvisoryLock, Backend, LockKey
from lockwatch.util.secrets import describe_dsn, dsn_secrets, first_line, redact

log = logging.getLogger(__name__)

APPLICATION_NAME = "lockwatch"
QUERY_CHARS = 1024  # enough to recognise a statement, bounded whatever clients send
MAX_CHAIN = 4  # blocking steps followed past the advisory-lock sessions
LOCK_TIMEOUT_MS = 1000  # lockwatch takes no locks; this guards catalog reads all the same
WORK_MEM = "32MB"  # enough to copy 100,000 locks without a temp file


class _ClientText(Loader):
    """Text as any client left it: a session in a SQL_ASCII database can put
    bytes that are not UTF-8 into its query, and pg_stat_activity hands them
    on unchecked. One such client must not fail every poll: bad bytes show
    as U+FFFD instead."""

    def load(self, data: Buffer) -> str:
        return bytes(data).decode("utf-8", errors="replace")


class _ClientTextBinary(_ClientText):
    format = Format.BINARY


CLIENT_TEXT = AdaptersMap(psycopg.adapters)
for _type in ("text", "varchar", "name", "bpchar"):
    CLIENT_TEXT.register_loader(_type, _ClientText)
    CLIENT_TEXT.register_loader(_type, _ClientTextBinary)


class SampleError(Exception):
    """Sampling failed; the message is safe to show (no secrets)."""


class TargetUnavailableError(SampleError):
    """A source needs the target's database session and there is none: not the
    source's own failure (the target's ``target_down`` already says so)."""


@dataclass(frozen=True, slots=True)
class RawSample:
    """One poll as the server answered it, before hold times are tracked."""

    server_version: int
    locks: tuple[AdvisoryLock, ...]
    backends: dict[int, Backend]
    seconds: float


# Bits of the ``flags`` array of advisory_locks.sql.
PAIR_KEY, SHARED, WAITING = 1, 2, 4


def _sql_text(name: str) -> str:
    return (resources.files("lockwatch.sample") / "sql" / name).read_text(encoding="utf-8")


@cache
def advisory_locks_query(server_version: int) -> sql.Composed:
    """The advisory-lock query for a server version, composed once per version.

    The versions differ in one column only, so one file serves them all and the
    difference goes in as an SQL fragment, never as text pasted into the query.
    """
    waitstart = sql.SQL("l.waitstart" if server_version >= 140000 else "NULL::timestamptz")
    return sql.SQL(_sql_text("advisory_locks.sql")).format(waitstart=waitstart)


@cache
def lock_sessions_query() -> sql.SQL:
    return sql.SQL(_sql_text("lock_sessions.sql"))


def backend_from_row(row: Mapping[str, Any]) -> Backend:
    """A ``pg_stat_activity`` row, selected with the columns the queries here use."""
    return Backend(
        pid=row["pid"],
        backend_start=row["backend_start"],
        database=row["datname"],
        usename=row["usename"],
        application_name=row["application_name"] or "",
        client_addr=row["client_addr"],
        state=row["state"],
        state_change=row["state_change"],
        xact_start=row["xact_start"],
        query_start=row["query_start"],
        wait_event_type=row["wait_event_type"],
        wait_event=row["wait_event"],
        query=row["query"] or "",
        blocked_by=tuple(row.get("blocked_by") or ()),
        client_port=row["client_port"],
    )


# One element of advisory_locks.sql's arrays, with the session it belongs to.
LockRow = tuple[int, datetime | None, int, int, int, datetime | None]


def decode_locks(
    arrays: Mapping[str, Any],
    backends: Mapping[int, Backend],
    known: Mapping[LockRow, AdvisoryLock] | None = None,
) -> dict[LockRow, AdvisoryLock]:
    """The locks in advisory_locks.sql's row, by the raw values they came from.

    Locks of a pid missing from ``backends`` are left out: the session ended
    between the two queries, and its locks with it. A lock found in ``known``
    (the previous poll's answer) is that same object again, so that most of
    a poll over many long-held locks costs one lookup per lock.
    """
    known = known or {}
    decoded: dict[LockRow, AdvisoryLock] = {}
    pids = arrays["pids"]
    if pids is None:
        return decoded
    waitstarts = iter(arrays["waitstarts"] or ())
    for pid, classid, objid, flags in zip(
        pids, arrays["classids"], arrays["objids"], arrays["flags"], strict=True
    ):
        wait_start = next(waitstarts, None) if flags & WAITING else None
        backend = backends.get(pid)
        if backend is None:
            continue
        raw: LockRow = (pid, backend.backend_start, classid, objid, flags, wait_start)
        lock = known.get(raw)
        if lock is None:
            lock = AdvisoryLock(
                # An advisory lock lives in the database its session is connected to.
                database=backend.database or "",
                key=LockKey.from_pg_locks(classid, objid, 2 if flags & PAIR_KEY else 1),
                mode="ShareLock" if flags & SHARED else "ExclusiveLock",
                granted=not flags & WAITING,
                pid=pid,
                wait_start=wait_start,
            )
        decoded[raw] = lock
    return decoded


def _sessions_params(pids: Iterable[int]) -> dict[str, Any]:
    return {"pids": sorted(pids), "query_chars": QUERY_CHARS, "max_chain": MAX_CHAIN}


def _chains(sessions: Mapping[int, Backend], pids: Iterable[int]) -> dict[int, Backend]:
    """The sessions of ``pids`` and those blocking them, MAX_CHAIN steps deep:
    what lock_sessions.sql returns for ``pids`` alone."""
    keep = {pid for pid in pids if pid in sessions}
    step = keep
    for _ in range(MAX_CHAIN):
        step = {b for pid in step for b in sessions[pid].blocked_by if b in sessions} - keep
        keep |= step
    return {pid: sessions[pid] for pid in sorted(keep)}


def read_advisory_locks(
    conn: psycopg.Connection[dict[str, Any]],
    server_version: int,
    known: Mapping[LockRow, AdvisoryLock] | None = None,
    expected: Collection[int] = (),
) -> tuple[dict[LockRow, AdvisoryLock], dict[int, Backend]]:
    """Every advisory lock and the sessions behind them (and their blockers).

    Two statements: the locks, as arrays, and the sessions that hold or await
    them. Which sessions those are is only known from the locks, so the
    sessions of ``expected`` (the last poll's) are asked for in the same round
    trip, in a pipeline; only sessions that took a lock since cost a second.
    """
    with conn.pipeline():
        arrays = conn.execute(advisory_locks_query(server_version), prepare=True, binary=True)
        guessed = (
            conn.execute(lock_sessions_query(), _sessions_params(expected), prepare=True)
            if expected
            else None
        )
    row = arrays.fetchone()
    if row is None or row["pids"] is None:
        return {}, {}
    pids = set(row["pids"])
    rows = guessed.fetchall() if guessed is not None else []
    missing = pids.difference(r["pid"] for r in rows)
    if missing:
        rows += conn.execute(
            lock_sessions_query(), _sessions_params(missing), prepare=True
        ).fetchall()
    backends = _chains({r["pid"]: backend_from_row(r) for r in rows}, pids)
    return decode_locks(row, backends, known), backends


class PgLockSampler:
    """Polls one target. Not thread-safe except for ``abort``, which the
    watchdog calls from another thread when a poll hangs."""

    def __init__(
        self,
        dsn: str,
        *,
        connect_timeout: float = 5.0,
        statement_timeout: float = 5.0,
    ) -> None:
        self._dsn = dsn
        self._secrets = dsn_secrets(dsn)
        self._connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self._conn: psycopg.Connection[dict[str, Any]] | None = None
        self._server_version = 0
        self._guard = threading.Lock()
        self._known: dict[LockRow, AdvisoryLock] = {}  # the last poll's locks
        self._expected: tuple[int, ...] = ()  # and the pids of their sessions

    @property
    def where(self) -> str:
        return describe_dsn(self._dsn)

    def _connect(self) -> psycopg.Connection[dict[str, Any]]:
        # Keepalives and tcp_user_timeout make a silently dead peer fail the
        # poll instead of hanging it; the watchdog's abort() covers the rest.
        conn = psycopg.connect(
            self._dsn,
            application_name=APPLICATION_NAME,
            connect_timeout=max(1, round(self._connect_timeout)),
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            tcp_user_timeout=int((self._statement_timeout + self._connect_timeout) * 1000),
            autocommit=True,
            row_factory=dict_row,
            context=CLIENT_TEXT,
        )
        # Session settings go through SET rather than the ``options`` startup
        # parameter, which connection poolers reject. pg_lock_status() copies
        # the lock table into memory bounded by work_mem and spills the rest
        # to a temp file: past ~25,000 locks at the default 4MB, writing and
        # reading it back was an eighth of the poll's server time.
        conn.execute(
            "SELECT pg_catalog.set_config('statement_timeout', %(st)s, false),"
            " pg_catalog.set_config('lock_timeout', %(lt)s, false),"
            " pg_catalog.set_config('default_transaction_read_only', 'on', false),"
            " pg_catalog.set_config('idle_in_transaction_session_timeout', %(st)s, false),"
            " pg_catalog.set_config('work_mem', %(wm)s, false)",
            {
                "st": str(int(self._statement_timeout * 1000)),
                "lt": str(LOCK_TIMEOUT_MS),
                "wm": WORK_MEM,
            },
        )
        row = conn.execute(
            "SELECT pg_catalog.current_setting('server_version_num')::int AS v"
        ).fetchone()
        self._server_version = int(row["v"]) if row else 0
        return conn

    def connect(self) -> psycopg.Connection[dict[str, Any]]:
        """The poll's session, opened if there is none. Raises SampleError.

        Bounded by connect_timeout alone: ``abort()`` cannot break a
        connection still being made, so the watchdog times only what follows.
        """
        with self._guard:
            conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = self._connect()
        except (psycopg.Error, OSError) as exc:
            raise self._failed(exc) from None
        with self._guard:
            self._conn = conn
        return conn

    def _failed(self, exc: psycopg.Error | OSError) -> SampleError:
        """The session closed for the next poll to reopen, and the error to raise."""
        self.close()
        if isinstance(exc, psycopg.Error):
            return SampleError(self._explain(exc))
        return SampleError(redact(f"{self.where}: {exc}", self._secrets))

    def sample(self) -> RawSample:
        """One poll: connect if needed, read advisory locks. Raises SampleError."""
        started = time.perf_counter()
        conn = self.connect()
        try:
            self._known, backends = read_advisory_locks(
                conn, self._server_version, self._known, self._expected
            )
            self._expected = tuple(backends)
        except (psycopg.Error, OSError) as exc:
            raise self._failed(exc) from None
        return RawSample(
            self._server_version,
            tuple(self._known.values()),
            backends,
            time.perf_counter() - started,
        )

    def _explain(
        self, exc: psycopg.Error, what: str = "poll query", grant: str = "pg_monitor"
    ) -> str:
        if isinstance(exc, psycopg.errors.QueryCanceled):
            reason = f"{what} cancelled by statement_timeout ({self._statement_timeout:g}s)"
        elif isinstance(exc, psycopg.errors.InsufficientPrivilege):
            reason = f"insufficient privilege (grant {grant} to the role): {exc}"
        else:
            reason = first_line(exc)
        return redact(f"{self.where}: {reason}", self._secrets)

    def query(
        self, query: str | sql.SQL | sql.Composed, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Run another read-only query on the poll's session (a queue's depth,
        the workers' sessions), after ``sample()`` has connected it.

        A query that fails leaves the session usable (it runs in autocommit);
        only a broken connection is closed, for the next poll to reopen.
        """
        with self._guard:
            conn = self._conn
        if conn is None or conn.closed:
            raise TargetUnavailableError(f"{self.where}: not connected")
        try:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if conn.closed or conn.broken:
                self.close()
            raise SampleError(self._explain(exc, "query", "SELECT on its tables")) from None
        except psycopg.Error as exc:
            raise SampleError(self._explain(exc, "query", "SELECT on its tables")) from None

    def abort(self) -> None:
        """Break a poll that is stuck on a silent server, from another thread.

        Shutting the socket down wakes the blocked read with an error; closing
        the connection object itself from here would race with the reader.
        """
        with self._guard:
            conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            fd = os.dup(conn.fileno())
        except (OSError, psycopg.Error):
            return
        with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._guard:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                log.debug("closing the connection to %s failed", self.where)
