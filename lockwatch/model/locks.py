"""Advisory locks and the sessions behind them, as one poll saw them."""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from operator import itemgetter
from typing import NamedTuple

from lockwatch.model.holdings import (
    HolderOf,
    Holdings,
    LockChange,
    LockTally,
    holder_of,
    rows_of,
)
from lockwatch.model.lock_keys import LockKey as LockKey  # noqa: PLC0414 (imported from here)
from lockwatch.model.lock_waits import LockWait, PreparedXact
from lockwatch.model.table_change import Parts, carried_parts
from lockwatch.text import client_address

# The states of a session that runs no SQL right now.
IDLE_STATES = frozenset({"idle", "idle in transaction", "idle in transaction (aborted)"})
# pg_stat_activity.state of a session with track_activities off: no state, no
# query, no time of its last change.
UNTRACKED_STATE = "disabled"
# What lockwatch shows of a session's activity that its role may not see.
HIDDEN = "hidden (the role lacks pg_monitor)"
# What lockwatch cannot judge while its role sees only its own roles' sessions.
HIDDEN_SESSION_LOSSES = (
    "other roles' sessions show no client address, state, transaction, times or query",
    "lock_orphaned and lock_pooled_session cannot fire on them",
    "allowed holders are judged by application_name alone, never by address",
    "a hold is timed from lockwatch's first sight of it, not from its holder's last state change",
)


@dataclass(frozen=True, slots=True)
class SessionVisibility:
    """What lockwatch's role may see of other roles' sessions, read once per
    connection."""

    role: str
    # pg_read_all_stats (pg_monitor has it, a superuser has everything): every
    # session's activity in pg_stat_activity, not only its own roles'.
    sees_all_sessions: bool


@dataclass(frozen=True, slots=True)
class Backend:
    """One server backend (a row of ``pg_stat_activity``) as lockwatch saw it."""

    pid: int
    backend_start: datetime | None
    database: str | None
    usename: str | None
    application_name: str
    client_addr: str | None  # None for a Unix-socket client
    state: str | None  # active, idle, idle in transaction, ...
    state_change: datetime | None
    xact_start: datetime | None
    query_start: datetime | None
    wait_event_type: str | None
    wait_event: str | None
    query: str  # truncated by the sampler
    # pg_blocking_pids(), filled only for backends that wait on a heavyweight lock
    blocked_by: tuple[int, ...] = ()
    # The client's TCP port: with client_addr it names the pooler connection a
    # backend serves, where pid alone could belong to another server.
    client_port: int | None = None
    # Its host name, where the server resolves client addresses (log_hostname).
    client_hostname: str | None = None
    # Whether lockwatch's role may see the session's activity. A role without
    # pg_monitor (pg_read_all_stats) sees only its own roles' sessions: of the
    # others, pg_stat_activity shows pid, user and application_name, and NULL
    # for the address, state, times and query, which say nothing of them.
    visible: bool = True
    # The server's id of its query (PostgreSQL 14+ with compute_query_id);
    # None: not computed, not read, or hidden.
    query_id: int | None = None

    @property
    def where(self) -> str:
        """Where the client connects from, for people."""
        if not self.visible:
            return HIDDEN
        return client_address(self.client_addr, self.client_port, self.client_hostname)

    @property
    def identity(self) -> tuple[int, datetime | None]:
        """A pid is reused by the server; pid + backend_start names one session."""
        return (self.pid, self.backend_start)

    @property
    def running_sql(self) -> bool:
        return self.state == "active"

    @property
    def waiting_on_lock(self) -> bool:
        return self.wait_event_type == "Lock"


@dataclass(frozen=True, slots=True)
class AdvisoryLock:
    """One advisory-lock row of ``pg_locks``: a granted hold or a wait."""

    database: str
    key: LockKey
    mode: str  # ExclusiveLock or ShareLock
    granted: bool
    pid: int
    wait_start: datetime | None = None  # PostgreSQL 14+, waiters only
    # When lockwatch first saw this backend hold (or wait for) this key in this
    # mode; filled by the hold tracker, never by the server.
    first_seen: datetime | None = None
    # Whether this hold was seen with no transaction open on its session, which
    # only a session-level lock survives; filled by the hold tracker (None: not
    # judged). pg_locks does not tell the two levels apart.
    session_level: bool | None = None
    # The prepared transaction holding (or, never, awaiting) the lock; its
    # pid is then 0, as pg_blocking_pids() names it to its waiters.
    prepared: PreparedXact | None = None

    @property
    def shared(self) -> bool:
        return self.mode == "ShareLock"


# The holders of each (database, key) asked about (``LockSummary.key_holders``).
KeyHolders = Mapping[tuple[str, LockKey], list[HolderOf]]
_Asked = tuple[frozenset[tuple[str, LockKey]], KeyHolders]
_Earlier = tuple[LockChange["AdvisoryLock"], list[Holdings], list[_Asked], list["LockTable"]]


@dataclass(frozen=True, slots=True)
class LockSummary:
    """What the detectors ask of all of a poll's locks at once: most polls of
    a quiet server then judge no lock one by one. The lock monitor keeps it
    while the locks stay the same tuple, and carries it over to the next
    poll's locks by what changed (``LockChange``) when they changed a little."""

    locks: tuple[AdvisoryLock, ...]  # the locks it sums up
    oldest: datetime | None  # the earliest first_seen
    newest: datetime | None  # the latest first_seen; None when a lock has none
    unusual: bool  # any wait, or any lock of a prepared transaction
    pids: frozenset[int]  # of every lock
    session_holders: frozenset[int]  # pids holding a session-level lock
    _tally: LockTally = field(compare=False, repr=False)  # counted, to be carried over
    # The locks per key, made the first time a publisher asks (``table``).
    _table: list[LockTable] = field(default_factory=list, compare=False, repr=False)
    # The locks per holder, made the first time incidents are told (``holdings``).
    _holdings: list[Holdings] = field(default_factory=list, compare=False, repr=False)
    # What changed since the last poll's summary, with its holdings, holders of
    # keys asked about and table, while they may be carried over.
    _earlier: list[_Earlier] = field(default_factory=list, compare=False, repr=False)
    # The holders of the keys last asked about (``key_holders``): the keys and the answer.
    _asked: list[_Asked] = field(default_factory=list, compare=False, repr=False)

    def table(self) -> LockTable:
        # Two readers at once may both make it; either one is the same table.
        if not self._table:
            change, _, _, earlier = self._earlier[0] if self._earlier else (None, [], [], [])
            parts = carried_parts(earlier[0], change, _per_database) if change and earlier else None
            self._table.append(LockTable.of(self.locks, parts))
            self._earlier[:] = [(c, held, asked, []) for c, held, asked, _ in self._earlier]
        return self._table[0]

    def holdings(self) -> Holdings:
        """Kept with the summary: a steady flood tells its incidents' loads
        without a pass over the locks, and locks changed a little carry the
        last poll's over, changed holder by holder."""
        if not self._holdings:
            change, earlier, _, _ = self._earlier[0] if self._earlier else (None, [], [], [])
            if change is not None and earlier and not self.unusual:
                self._holdings.append(earlier[0].changed(change, self.locks))
            else:
                self._holdings.append(Holdings.of(self.locks))
            self._earlier[:] = [(c, [], asked, table) for c, _, asked, table in self._earlier]
        return self._holdings[0]

    def change(self) -> LockChange[AdvisoryLock] | None:
        """How these locks came from the last poll's summary's, when carried over."""
        return self._earlier[0][0] if self._earlier else None

    def key_holders(self, keys: frozenset[tuple[str, LockKey]]) -> KeyHolders:
        """The holders of each of ``keys`` (database, key) holding it now: the
        same keys asked again of the same locks (a steady flood's findings)
        are not looked for again, those of the last poll's carried over."""
        if self._asked and self._asked[0][0] == keys:
            return self._asked[0][1]
        plain = {(database, key.pair, key.first, key.second) for database, key in keys}
        change, _, earlier, _ = self._earlier[0] if self._earlier else (None, [], [], [])
        rows, found = self.locks, {}
        if change is not None and earlier and earlier[0][0] == keys:
            rows, found = change.taken, {key: list(held) for key, held in earlier[0][1].items()}
            for lock in rows_of(plain, change.released):
                if lock.granted:
                    found[(lock.database, lock.key)].remove(holder_of(lock))
        for lock in rows_of(plain, rows):
            if lock.granted:
                found.setdefault((lock.database, lock.key), []).append(holder_of(lock))
        found = {watched: holders for watched, holders in found.items() if holders}
        self._asked[:] = [(keys, found)]
        self._earlier[:] = [(c, held, [], table) for c, held, _, table in self._earlier]
        return found

    @classmethod
    def of(
        cls,
        locks: tuple[AdvisoryLock, ...],
        earlier: LockSummary | None = None,
        change: LockChange[AdvisoryLock] | None = None,
    ) -> LockSummary:
        """``earlier``: the last poll's summary, carried over to ``locks`` by
        ``change`` (told by identity when not given) when few changed."""
        if earlier is not None and change is None:
            change = LockChange.between(earlier.locks, locks)
        if earlier is None or change is None or not change.few(len(locks)):
            tally, carried = LockTally.of(locks), []
        else:
            tally = earlier._tally.changed(change, locks)
            carried = [(change, earlier._holdings, earlier._asked, earlier._table)]
        pids, held = frozenset(tally.pids), frozenset(tally.session_pids)
        return cls(
            locks, tally.oldest, tally.newest, tally.unusual, pids, held, tally, _earlier=carried
        )


_FIRST_HELD = itemgetter(0)  # a KeyRows' first_held


class KeyRows(NamedTuple):
    """The rows of one key in one database. A named tuple whose fields come in
    the order keys are shown (the earliest first hold, then most waiters,
    then database and key), so that 50,000 of them sort as plain tuples."""

    first_held: datetime | None  # the earliest first_seen of its holders
    fewer_waiters: int  # minus the waiters: the most waiters sort first
    database: str
    key_pair: bool  # the key's own order, as plain values
    key_first: int
    key_second: int
    key: LockKey
    locks: tuple[AdvisoryLock, ...]

    @property
    def waiters(self) -> int:
        return -self.fewer_waiters

    def tie(self) -> tuple[int, str, bool, int, int]:
        """The order of keys held for equally long: most waiters, then database and key."""
        return (self.fewer_waiters, self.database, self.key_pair, self.key_first, self.key_second)


def _key_rows(
    database: str,
    key: LockKey,
    locks: tuple[AdvisoryLock, ...],
    first: datetime | None,
    waiters: int,
) -> KeyRows:
    return KeyRows(first, -waiters, database, key.pair, key.first, key.second, key, locks)


@dataclass(frozen=True, slots=True)
class LockTable:
    """A poll's locks per (database, key), in the order the publishers show
    them, longest held first: made once per poll's locks, so that a scrape or
    a page of 50,000 locks walks only the keys it shows."""

    dated: tuple[KeyRows, ...]  # keys with a known hold, in their order
    firsts: tuple[datetime, ...]  # their first holds, in that order (bisected)
    undated: tuple[KeyRows, ...]  # keys with no known hold, by ``tie``
    single: Mapping[LockKey, KeyRows]  # each key with rows in one database
    spread: Mapping[LockKey, tuple[KeyRows, ...]]  # each key with rows in several
    counts: Mapping[str, tuple[int, int]]  # (held, waiting) rows per database

    @classmethod
    def of(cls, locks: tuple[AdvisoryLock, ...], carried: Parts | None = None) -> LockTable:
        """The table of ``locks``, from the last poll's ``carried`` over what
        changed when given (``table_change.carried_parts``)."""
        if carried is not None:
            dated, by_key, counts, undated, by_keys = carried
            return cls(
                tuple(dated), tuple(map(_FIRST_HELD, dated)), undated, by_key, by_keys, counts
            )
        # Most keys have one row: each lock's row is made as it comes, so each
        # key is hashed once (a LockKey's hash is a Python call); only the keys
        # with more rows get a list, and their rows are made again from it.
        # The named tuple made without its __new__: 50,000 Python calls fewer.
        make = tuple.__new__
        single: dict[LockKey, KeyRows] = {}
        more: dict[LockKey, list[AdvisoryLock]] = {}
        for lock in locks:
            key = lock.key
            row = make(
                KeyRows,
                (
                    lock.first_seen if lock.granted else None,
                    0 if lock.granted else -1,
                    lock.database,
                    key.pair,
                    key.first,
                    key.second,
                    key,
                    (lock,),
                ),
            )
            first = single.setdefault(key, row)
            if first is not row:
                more.setdefault(key, [*first.locks]).append(lock)
        spread: dict[LockKey, tuple[KeyRows, ...]] = {}
        for key, found in more.items():
            rows = _per_database(key, found)
            if len(rows) == 1:
                single[key] = rows[0]
            else:
                del single[key]
                spread[key] = rows
        every = [*single.values(), *(r for rows in spread.values() for r in rows)]
        dated = sorted(r for r in every if r.first_held is not None)
        tally = Counter((lock.database, lock.granted) for lock in locks)
        return cls(
            tuple(dated),
            tuple(r.first_held for r in dated if r.first_held is not None),
            tuple(sorted(r for r in every if r.first_held is None)),  # all None: by ``tie``
            single,
            spread,
            {database: (tally[database, True], tally[database, False]) for database, _ in tally},
        )

    @property
    def keys(self) -> int:
        """How many (database, key) have rows."""
        return len(self.dated) + len(self.undated)

    def rows(self, key: LockKey) -> tuple[KeyRows, ...]:
        """The key's rows, one per database it has rows in."""
        if key in self.single:
            return (self.single[key],)
        return self.spread.get(key, ())

    def longest_held(self, now: datetime) -> Iterator[KeyRows]:
        """Every key, longest held as of ``now`` first, then by ``tie``. A hold
        first seen at ``now`` or later counts as 0 s, like one not known."""
        cut = bisect_left(self.firsts, now)
        yield from islice(self.dated, cut)
        unheld = sorted(self.dated[cut:], key=KeyRows.tie)  # none past a poll's own time
        yield from heapq.merge(unheld, self.undated, key=KeyRows.tie)


def _per_database(key: LockKey, found: list[AdvisoryLock]) -> tuple[KeyRows, ...]:
    split: dict[str, list[AdvisoryLock]] = {}
    for lock in found:
        split.setdefault(lock.database, []).append(lock)
    return tuple(
        _key_rows(
            database,
            key,
            tuple(rows),
            min(
                (lock.first_seen for lock in rows if lock.granted and lock.first_seen is not None),
                default=None,
            ),
            sum(1 for lock in rows if not lock.granted),
        )
        for database, rows in split.items()
    )


@dataclass(frozen=True, slots=True)
class LockSnapshot:
    """Everything one poll of one target learnt about advisory locks."""

    target: str
    taken_at: datetime
    server_version: int  # server_version_num, e.g. 180001
    locks: tuple[AdvisoryLock, ...]
    # Every backend that holds or waits for an advisory lock, and every backend
    # waiting on a lock of another locktype with those blocking it (so a
    # blocking chain can be followed past advisory locks).
    backends: Mapping[int, Backend] = field(default_factory=dict)
    poll_seconds: float = 0.0
    visibility: SessionVisibility | None = None  # None: not known (a synthetic snapshot)
    # The locks summed up, when the monitor has it at hand (else summed on demand).
    summary: LockSummary | None = field(default=None, compare=False, repr=False)
    # lockwatch's own server time per poll, from pg_stat_statements (None: not known).
    server_seconds: float | None = None
    # The server's sessions waiting on the lock manager as the locks were read.
    lock_manager_waits: int | None = None
    # Every wait on a lock of another locktype (relation, row, transaction
    # id, ...), with who blocks it; their sessions are in ``backends``.
    waits: tuple[LockWait, ...] = ()

    def lock_summary(self) -> LockSummary:
        if self.summary is not None and self.summary.locks is self.locks:
            return self.summary
        return LockSummary.of(self.locks)

    def lock_table(self) -> LockTable:
        """The locks per key: the summary's, kept while the locks stay the same tuple."""
        if self.summary is not None and self.summary.locks is self.locks:
            return self.summary.table()
        return LockTable.of(self.locks)

    @property
    def waiting(self) -> bool:
        """Whether a session waits for an advisory lock."""
        return not all(lock.granted for lock in self.locks)

    @property
    def sessions_hidden(self) -> bool:
        """Whether other roles' sessions were hidden from lockwatch's role."""
        return self.visibility is not None and not self.visibility.sees_all_sessions

    def holders(self, database: str, key: LockKey) -> list[AdvisoryLock]:
        return [
            lock
            for lock in self.locks
            if lock.granted and lock.database == database and lock.key == key
        ]
