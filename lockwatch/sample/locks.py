"""Reads the advisory locks of one server and the sessions behind them: every
lock as one row of arrays, the sessions that hold or await them, and the
sessions that block those, in as few round trips as the last poll allows.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from operator import attrgetter
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from lockwatch.model.lock_waits import LockRowFact, LockWait, PreparedXact, lock_waits
from lockwatch.model.locks import AdvisoryLock, Backend, LockKey
from lockwatch.model.servers import WHOLE_SERVER, LockScope, ScopeKind
from lockwatch.sample.activity import QUERY_CHARS, SessionRows
from lockwatch.sample.lock_rows import LockDecoder, LockRow, lock_cursor, other_rows
from lockwatch.sample.server_time import PollServerTime
from lockwatch.sample.session import APPLICATION_NAME, TargetSession


@dataclass(frozen=True, slots=True)
class RawSample:
    """One poll as the server answered it, before hold times are tracked."""

    server_version: int
    locks: tuple[AdvisoryLock, ...]
    backends: dict[int, Backend]
    seconds: float
    # The server's statement_timestamp() of the lock read (None: not read).
    read_at: datetime | None = None
    # Whether any lock may be a wait (False: the server said none is, and
    # moving the locks' timestamps has nothing to move).
    waiting: bool = True
    # lockwatch's server time per poll, from pg_stat_statements (None: not known).
    server_seconds: float | None = None
    # The server's sessions waiting on the lock manager as the locks were read.
    lock_manager_waits: int | None = None
    # The waits on locks of other locktypes, and who blocks each.
    waits: tuple[LockWait, ...] = ()
    # The locks as the last poll's tuple with one stretch replaced: that
    # tuple, where the stretch starts, how many went and came (None: not so).
    spliced: tuple[tuple[AdvisoryLock, ...], int, int, int] | None = None

    def moved(self, offset: timedelta, known: MovedBackends | None = None) -> RawSample:
        """The sample with the server's timestamps moved by ``offset`` onto
        lockwatch's clock (``read_at`` too): a duration from a server
        timestamp is then measured against the server's own time, however far
        lockwatch's clock is from the server's. backend_start names a session
        and stays as read. ``known`` (the last poll's) gives a session read
        unchanged its moved value again instead of a new one."""
        if self.read_at is None or not offset:
            return self
        known = known or MovedBackends()
        backends = known.moved(self.backends, offset)
        locks = self.locks
        if self.waiting:
            locks = tuple(
                lock
                if lock.wait_start is None
                else replace(lock, wait_start=lock.wait_start + offset)
                for lock in locks
            )
        waits = tuple(
            wait if wait.wait_start is None else replace(wait, wait_start=wait.wait_start + offset)
            for wait in self.waits
        )
        spliced = self.spliced if locks is self.locks else None
        return replace(
            self,
            locks=locks,
            backends=backends,
            read_at=self.read_at + offset,
            waits=waits,
            spliced=spliced,
        )


class MovedBackends:
    """Sessions moved onto lockwatch's clock, poll after poll. The reader
    hands back the very same Backend for a session whose row did not change
    (``SessionRows``), and the offset stays put while the clocks agree, so a
    quiet poll's sessions are last poll's moved values again: no new objects,
    and equal at a glance to what the hold tracker saw."""

    def __init__(self) -> None:
        self._offset: timedelta | None = None
        self._moved: dict[int, tuple[Backend, Backend]] = {}  # pid: (as read, moved)

    def moved(self, backends: Mapping[int, Backend], offset: timedelta) -> dict[int, Backend]:
        if offset != self._offset:
            self._offset, self._moved = offset, {}
        last, self._moved = self._moved, {}
        for pid, backend in backends.items():
            hit = last.get(pid)
            self._moved[pid] = (
                hit if hit is not None and hit[0] is backend else (backend, _moved(backend, offset))
            )
        return {pid: moved for pid, (_, moved) in self._moved.items()}


def _moved(backend: Backend, offset: timedelta) -> Backend:
    def at(moment: datetime | None) -> datetime | None:
        return None if moment is None else moment + offset

    return replace(
        backend,
        state_change=at(backend.state_change),
        xact_start=at(backend.xact_start),
        query_start=at(backend.query_start),
    )


def _sql_text(name: str) -> str:
    return (resources.files("lockwatch.sample") / "sql" / name).read_text(encoding="utf-8")


# The queries of every poll go to psycopg as bytes, rendered once: a Composed
# is rendered again at every execute, bytes are looked up in psycopg's cache.


# The databases a target's lock read covers (model/servers.py); EXCEPT's
# names go in as a parameter.
_OWN_DATABASE = (
    "(SELECT d.oid FROM pg_catalog.pg_database AS d"
    " WHERE d.datname = pg_catalog.current_database())"
)
_SCOPES = {
    ScopeKind.WHOLE: "",
    # A transaction id or virtualxid lock is in no database (NULL).
    ScopeKind.OWN: f"\n  AND (l.database IS NULL OR l.database = {_OWN_DATABASE})",
    ScopeKind.EXCEPT: (
        "\n  AND (l.database IS NULL"
        " OR l.database <> ALL (ARRAY(SELECT d.oid FROM pg_catalog.pg_database AS d"
        " WHERE d.datname = ANY (%(skip)s::pg_catalog.text[]))))"
    ),
}


@cache
def advisory_locks_query(server_version: int, scope: ScopeKind = ScopeKind.WHOLE) -> bytes:
    """The advisory-lock query for a server version and a scope, composed once
    per pair.

    The versions differ in one column only, so one file serves them all and the
    difference goes in as an SQL fragment, never as text pasted into the query;
    so does the scope, whose database names are a parameter.
    """
    waitstart = sql.SQL("l.waitstart" if server_version >= 140000 else "NULL::timestamptz")
    text = sql.SQL(_sql_text("advisory_locks.sql"))
    return text.format(
        waitstart=waitstart,
        scope=sql.SQL(_SCOPES[scope]),
        own_application=sql.Literal(APPLICATION_NAME),
    ).as_bytes()


@cache
def lock_sessions_query(server_version: int) -> bytes:
    query_id = sql.SQL("a.query_id" if server_version >= 140000 else "NULL::int8")
    return sql.SQL(_sql_text("lock_sessions.sql")).format(query_id=query_id).as_bytes()


@cache
def prepared_xacts_query() -> sql.SQL:
    return sql.SQL(_sql_text("prepared_xacts.sql"))


def _prepared(conn: psycopg.Connection[dict[str, Any]], vxids: Any) -> dict[str, PreparedXact]:
    """The prepared transactions holding the locks with no pid, by virtualtransaction."""
    if not vxids:
        return {}
    rows = conn.execute(prepared_xacts_query(), {"vxids": sorted(set(vxids))}).fetchall()
    return {
        row["vxid"]: PreparedXact(
            row["xid"], row["gid"], row["owner"], row["database"], row["prepared"], row["age"]
        )
        for row in rows
    }


def advisory_blockers(
    locks: Iterable[AdvisoryLock], backends: Mapping[int, Backend]
) -> dict[int, Backend]:
    """``backends`` with each advisory waiter's ``blocked_by`` filled from the
    locks: the holders of its key whose mode conflicts with the one it waits
    for (pid 0 for a prepared transaction), as pg_blocking_pids() would say
    without the waiters queued ahead of it. One pass over the locks, where
    asking the server costs a convoy of N waiters N^2 pids."""
    locks = tuple(locks)
    waits = [lock for lock in locks if not lock.granted]
    if not waits:
        return dict(backends)
    awaited = {(lock.database, lock.key) for lock in waits}
    holders: dict[tuple[str, LockKey], list[AdvisoryLock]] = {}
    for lock in locks:
        if lock.granted and (lock.database, lock.key) in awaited:
            holders.setdefault((lock.database, lock.key), []).append(lock)
    filled = dict(backends)
    for wait in waits:
        backend = filled.get(wait.pid)
        if backend is None or backend.blocked_by:
            continue
        held = holders.get((wait.database, wait.key), [])
        blocking = [h.pid for h in held if not (h.shared and wait.shared)] or [h.pid for h in held]
        if blocking:
            filled[wait.pid] = replace(backend, blocked_by=tuple(sorted(set(blocking))))
    return filled


def _sessions_params(pids: Iterable[int]) -> dict[str, Any]:
    return {"pids": sorted(pids), "query_chars": QUERY_CHARS}


def waits_of(
    rows: list[LockRowFact],
    waits: tuple[LockWait, ...],
    backends: Mapping[int, Backend],
    server_version: int,
) -> tuple[LockWait, ...]:
    """The waits of ``rows`` (``waits``: as read, undated before 14); before
    PostgreSQL 14 (no waitstart) each waiter's wait is dated by its query's
    start, which is when a statement that waits on a lock usually began
    waiting."""
    if server_version >= 140000:
        return waits
    rows = [
        row
        if row.granted or (backend := backends.get(row.pid)) is None
        else replace(row, wait_start=backend.query_start)
        for row in rows
    ]
    return lock_waits(rows)


def wait_blockers(waits: Iterable[LockWait], backends: Mapping[int, Backend]) -> dict[int, Backend]:
    """``backends`` with each waiter's ``blocked_by`` filled from its wait."""
    filled = dict(backends)
    for wait in waits:
        backend = filled.get(wait.pid)
        if backend is not None:
            filled[wait.pid] = replace(backend, blocked_by=wait.blockers)
    return filled


def _judged_waits(
    conn: psycopg.Connection[dict[str, Any]],
    rows: list[LockRowFact],
    waits: tuple[LockWait, ...],
    backends: Mapping[int, Backend],
    server_version: int,
    scope: LockScope,
) -> tuple[LockWait, ...]:
    """The waits of ``rows`` (``waits``, as read) this target judges (those
    of its database's sessions when it shares the server), each naming the
    prepared transaction among its hard blockers."""
    waits = waits_of(rows, waits, backends, server_version) if rows else ()
    if waits and scope.kind is not ScopeKind.WHOLE:
        waits = _in_scope(waits, backends, scope, conn.info.dbname)
    return _with_prepared(conn, rows, waits)


def _with_prepared(
    conn: psycopg.Connection[dict[str, Any]],
    rows: list[LockRowFact],
    waits: tuple[LockWait, ...],
) -> tuple[LockWait, ...]:
    """``waits`` with the prepared transaction each waits on directly (a row
    it updated before PREPARE TRANSACTION), read only when one is waited on."""
    held = {row.tag: row.prepared_vxid for row in rows if row.granted and row.prepared_vxid}
    wanted = {held[wait.tag] for wait in waits if 0 in wait.hard and wait.tag in held}
    if not wanted:
        return waits
    prepared = _prepared(conn, wanted)
    return tuple(
        replace(wait, prepared=prepared.get(held.get(wait.tag, ""))) if 0 in wait.hard else wait
        for wait in waits
    )


def _in_scope(
    waits: tuple[LockWait, ...], backends: Mapping[int, Backend], scope: LockScope, own: str
) -> tuple[LockWait, ...]:
    """The waits of sessions in the databases the target judges: a
    transaction id's lock is in no database, so another target of the server
    reads it too, and judges only its own databases' waiters on it."""

    def judged(wait: LockWait) -> bool:
        backend = backends.get(wait.pid)
        database = None if backend is None else backend.database
        if scope.kind is ScopeKind.OWN:
            return database == own
        return database not in scope.skipped

    return tuple(filter(judged, waits))


def _waiting_pids(waiting: tuple[LockWait, ...]) -> frozenset[int]:
    """Every waiter and whoever holds a lock it waits for (the same pids
    whatever the order of its queue, which may be dated later)."""
    pids = {pid for wait in waiting for pid in (wait.pid, *wait.hard)}
    pids.discard(0)  # a prepared transaction's locks have no session
    return frozenset(pids)


class LockRead(NamedTuple):
    """What one reading of the advisory locks found."""

    locks: dict[LockRow, AdvisoryLock]
    backends: dict[int, Backend]  # the sessions behind them, and every waiter and its blockers
    read_at: datetime | None  # the server's time as it read the locks
    lock_manager_waits: int | None  # sessions waiting on LWLock:LockManager then
    waits: tuple[LockWait, ...] = ()  # the waits on locks of other locktypes


def read_advisory_locks(
    conn: psycopg.Connection[dict[str, Any]],
    server_version: int,
    decoder: LockDecoder | None = None,
    expected: Collection[int] = (),
    *,
    prepare: bool = True,
    seen: SessionRows | None = None,
    scope: LockScope = WHOLE_SERVER,
) -> LockRead:
    """Every advisory lock and the sessions behind them, every wait on a lock
    of another locktype with its blockers (model/lock_waits.py), the server's
    time as it read them, and its sessions on the lock manager.

    Two statements: the locks, as arrays, and the sessions that hold or await
    them. Which sessions those are is only known from the locks, so the
    sessions of ``expected`` (the last poll's) are asked for in the same round
    trip, in a pipeline; only sessions that took a lock or began a wait since
    cost a second.
    Through a pooler (``prepare=False``) nothing is prepared on the server: the
    next statement may run on another backend. ``decoder`` (the last poll's)
    makes an unchanged answer cost no work per lock, and ``seen`` (the last
    poll's) an unchanged session no new Backend. ``scope``: the databases
    read (every one, unless other targets read the same server).
    """
    decoder, seen = decoder or LockDecoder(), seen or SessionRows()

    def sessions_of(wanted: Collection[int]) -> psycopg.Cursor[tuple[Any, ...]]:
        cursor = seen.cursor(conn)
        query, params = lock_sessions_query(server_version), _sessions_params(wanted)
        return cursor.execute(query, params, prepare=prepare, binary=True)

    with conn.pipeline():
        arrays = lock_cursor(conn).execute(
            advisory_locks_query(server_version, scope.kind),
            {"skip": list(scope.skipped)} if scope.kind is ScopeKind.EXCEPT else None,
            prepare=prepare,
            binary=True,
        )
        guessed = sessions_of(expected) if expected else None
    row = arrays.fetchone()
    assert row is not None  # an aggregate without GROUP BY answers one row
    others = other_rows(row)
    if row["owners"] is None and not others:
        return LockRead(decoder.nothing(), {}, row["read_at"], row["lock_manager_waits"])
    waiting = lock_waits(others)  # once: dated anew only before PostgreSQL 14 (waits_of)
    pids = decoder.pids(row) | _waiting_pids(waiting)
    sessions = seen.backends(guessed) if guessed is not None else {}
    if missing := pids.difference(sessions):
        sessions.update(seen.backends(sessions_of(missing)))
    backends = {pid: sessions[pid] for pid in sorted(pids) if pid in sessions}
    if row["owners"] is None:
        locks = decoder.nothing()
    else:
        locks = decoder.decode(row, backends, _prepared(conn, row["prepared"]))
    waits = _judged_waits(conn, others, waiting, backends, server_version, scope)
    backends = wait_blockers(waits, backends)
    if row["waitstarts"] is not None:  # some advisory lock waits: its blockers come from the locks
        backends = advisory_blockers(locks.values(), backends)
    return LockRead(locks, backends, row["read_at"], row["lock_manager_waits"], waits)


class AdvisoryLockReader:
    """Reads the advisory locks of one target through its session, poll after
    poll: the previous answer makes the next one cheap (see
    ``read_advisory_locks``)."""

    def __init__(self, session: TargetSession) -> None:
        self.session = session
        self._decoder = LockDecoder()  # the last poll's locks
        self._locks: tuple[AdvisoryLock, ...] = ()  # as a tuple
        self._waiting = False  # and whether any of them waits
        self._expected: tuple[int, ...] = ()  # and the pids of their sessions
        self._sessions = SessionRows()  # and those sessions' rows
        self.server_time = PollServerTime()
        self._read_at: datetime | None = None  # the server's time at the last read

    def read(self) -> RawSample:
        """One reading on the connected session. Raises SampleError."""
        started = time.perf_counter()
        # A failed read closes the session: a pipeline broken midway is not
        # worth reusing, and the next poll reconnects.
        scope = self.session.lock_scope(self._read_at)
        with self.session.step(keep_open=False) as conn:
            known = self._decoder.locks
            locks, backends, read_at, lock_manager_waits, waits = read_advisory_locks(
                conn,
                self.session.server_version,
                self._decoder,
                self._expected,
                prepare=self.session.prepare,
                seen=self._sessions,
                scope=scope,
            )
        self._read_at = read_at
        self._expected = tuple(backends)
        self._sessions.keep(backends)
        server_seconds = self.server_time.after_poll(self.session)
        spliced = None
        if locks is not known:
            # The same answer is the same tuple again: the hold tracker
            # then knows at a glance that no lock changed.
            stretch = self._decoder.stretch
            spliced = stretch if stretch is not None and stretch[0] is self._locks else None
            self._locks = self._decoder.ordered
            # A stretch is decoded alone only while no lock waits.
            self._waiting = spliced is None and not all(map(attrgetter("granted"), self._locks))
        return RawSample(
            self.session.server_version,
            self._locks,
            backends,
            time.perf_counter() - started,
            read_at,
            waiting=self._waiting,
            server_seconds=server_seconds,
            lock_manager_waits=lock_manager_waits,
            waits=waits,
            spliced=spliced,
        )


class PgLockSampler:
    """A session and its lock reader in one, for one-off readings
    (``lockwatch snapshot``, the tests, the bench); the daemon's runner keeps
    the session itself and shares it with every source of the target."""

    def __init__(
        self, dsn: str, *, connect_timeout: float = 5.0, statement_timeout: float = 5.0
    ) -> None:
        self.session = TargetSession(
            dsn, connect_timeout=connect_timeout, statement_timeout=statement_timeout
        )
        self.reader = AdvisoryLockReader(self.session)

    def sample(self) -> RawSample:
        """Connect if needed and read advisory locks. Raises SampleError."""
        self.session.connect()
        return self.reader.read()

    def close(self) -> None:
        self.session.close()
