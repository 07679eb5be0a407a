"""Which keys of a snapshot are worth checking, and their groups: the rows of
one (database, key) with what the settings say about it, made one at a time
(at 50,000 keys past their budget, all at once was most of a poll)."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import compress
from operator import attrgetter, not_

from lockwatch.detect.evidence import seconds_between
from lockwatch.detect.lock_groups import Histories, Holder, KeyGroup, Waiter
from lockwatch.model.catalogue import HeldLocks
from lockwatch.model.holdings import LockChange
from lockwatch.model.locks import IDLE_STATES, AdvisoryLock, LockKey, LockSnapshot, LockSummary
from lockwatch.model.pooler import PooledBackend
from lockwatch.settings.fields import Learned
from lockwatch.settings.locks import LockSettings, NamedLock


def _before(now: datetime, seconds: float) -> datetime:
    """``now`` less ``seconds``, and a millisecond later: a cut-off that is never
    stricter than the checks' own arithmetic in seconds."""
    try:
        return now - timedelta(seconds=seconds) + timedelta(milliseconds=1)
    except OverflowError:
        return datetime.min.replace(tzinfo=now.tzinfo)


def _quiet(summary: LockSummary, held_before: datetime, suspects: set[int]) -> bool:
    """What worth_checking's loop finds lock by lock when no lock is worth
    checking (and no key named), told from the summary of the locks: no wait
    nor prepared transaction, none held since before ``held_before``, none of
    a suspect session."""
    return (
        not summary.unusual
        and (summary.oldest is None or summary.oldest >= held_before)
        and suspects.isdisjoint(summary.pids)
    )


def _lowest_budgets(
    settings: LockSettings, history: Histories | None, now: datetime
) -> tuple[float, float]:
    """(max_hold, orphan_after) no key is judged under: the target's, or the
    lowest budget learned for a key when they are auto."""
    max_hold, orphan_after = settings.static_max_hold, settings.static_orphan_after
    auto_hold = isinstance(settings.max_hold, Learned)
    auto_orphan = isinstance(settings.orphan_after, Learned)
    if history and (auto_hold or auto_orphan):
        learned = (settings.learned_budget(h, now) for h in history.values())
        lowest = min((b for b in learned if b is not None), default=None)
        if lowest is not None:
            max_hold = min(max_hold, lowest) if auto_hold else max_hold
            orphan_after = min(orphan_after, lowest) if auto_orphan else orphan_after
    return max_hold, orphan_after


def worth_checking(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    pooled: Mapping[int, object],
    history: Histories | None = None,
) -> Sequence[AdvisoryLock]:
    """The rows of every key that could raise a finding (the locks' own tuple
    when every row is: a flood's 50,000 are not copied).

    In a busy database most keys are held by a working session for less than
    any budget; a few comparisons tell them apart, where building their groups
    and evidence would be most of a poll at 50,000 locks. A key is kept for a
    waiter, a hold past the target's max_hold or orphan_after (or the lowest
    budget learned for a key, when they are auto), a holder idle past its
    orphan_after or on a pooled server connection, or a name (which may carry
    its own budgets and allowed holders). A new check must fire only on keys
    kept here, and on none of a poll ``_quiet`` passes over (which tells from
    the locks' ``LockSummary`` that the loop would keep nothing).
    """
    max_hold, orphan_after = _lowest_budgets(settings, history, now)
    if max_hold < 0 or orphan_after < 0:
        return snapshot.locks  # every holder is past a negative budget
    # Held past orphan_after counts too: a session that has run other
    # statements since is an orphan however busy it is.
    held_before = _before(now, min(max_hold, orphan_after))
    idle_before = _before(now, orphan_after)
    named = {lock.key for lock in settings.named}
    suspects = set(pooled) | {
        pid
        for pid, backend in snapshot.backends.items()
        if backend.state in IDLE_STATES
        and backend.state_change is not None
        and backend.state_change < idle_before
    }
    summary = snapshot.lock_summary()
    if not named and _quiet(summary, held_before, suspects):
        return []
    told = None if named else _told_by_hold_times(snapshot.locks, summary, held_before, suspects)
    if told is not None:
        return told
    loud: set[tuple[str, LockKey]] = set()
    quiet = False
    for lock in snapshot.locks:
        if (
            not lock.granted
            or (lock.first_seen is not None and lock.first_seen < held_before)
            or lock.pid in suspects
            or lock.prepared is not None  # no session: always an orphan in the making
            or (named and lock.key in named)
        ):
            loud.add((lock.database, lock.key))
        else:
            quiet = True
    if not loud:
        return []
    if not quiet:
        return snapshot.locks  # a flood: every row is kept
    return [lock for lock in snapshot.locks if (lock.database, lock.key) in loud]


def _told_by_hold_times(
    locks: tuple[AdvisoryLock, ...],
    summary: LockSummary,
    held_before: datetime,
    suspects: set[int],
) -> Sequence[AdvisoryLock] | None:
    """worth_checking's loop (no key named) when hold times alone tell: a
    steady flood (every row held since before ``held_before``), or every lock
    granted, seen and none a suspect's, no key with a row held for less (a
    flood with a few new locks): the rows held past, told column by column
    through C. None when the loop must tell."""
    if summary.newest is not None and summary.newest < held_before:
        return locks  # a steady flood: every row held past a budget
    if summary.unusual or summary.newest is None or not suspects.isdisjoint(summary.pids):
        return None
    past = list(map(held_before.__gt__, map(_FIRST_SEEN, locks)))
    held_past = list(compress(locks, past))
    young = set(map(_ROW_KEY, compress(locks, map(not_, past))))
    return held_past if young.isdisjoint(map(_ROW_KEY, held_past)) else None


@dataclass(frozen=True, slots=True)
class Alike:
    """Keys that every check judges alike but for the key: each the only row of
    its key, granted to one session in one mode, first seen at the same
    moment, unnamed. Only the lowest key's ``group`` is built; the rows of the
    next lowest (``also``) are listed, and ``more`` keys (``also`` among them)
    counted, judged as it is."""

    group: KeyGroup
    also: tuple[AdvisoryLock, ...]
    more: int


# A key built on its own: database, key, its name (None: unnamed), its rows.
KeyRowsOf = tuple[str, LockKey, NamedLock | None, list[AdvisoryLock]]
# A row's (database, key) as plain values, hashed in C; the shape of keys held alike.
RowKey = tuple[str, bool, int, int]
Shape = tuple[str, int, str, datetime | None, bool | None]


@dataclass(slots=True)
class RowPlan:
    """A poll's rows worth checking sorted into keys: those built on their
    own, those ignored, and the sets of keys held alike (the lowest rows, and
    how many in all). The lock monitor keeps it; it is used again while every
    row is worth checking and the settings and the locks held on purpose stay
    the same: as it is while the locks are the very same tuple (a steady
    flood sorts its 50,000 rows once), changed by the rows released and taken
    when they are the next poll's (a changed flood sorts only those)."""

    locks: tuple[AdvisoryLock, ...] | None = None  # None: not to be used again
    settings: LockSettings | None = None
    on_purpose: HeldLocks | None = None
    built: int | None = None
    keys: dict[RowKey, KeyRowsOf] = field(default_factory=dict)
    ignored: dict[RowKey, list[AdvisoryLock]] = field(default_factory=dict)
    alike: dict[Shape, tuple[list[AdvisoryLock], int]] = field(default_factory=dict)

    def fits(
        self,
        locks: tuple[AdvisoryLock, ...] | None,
        settings: LockSettings,
        on_purpose: HeldLocks | None,
        built: int | None,
    ) -> bool:
        return (
            locks is not None
            and self.locks is locks
            and self.settings is settings
            and self.on_purpose == on_purpose
            and self.built == built
        )


def key_groups(
    snapshot: LockSnapshot,
    settings: LockSettings,
    now: datetime,
    pooled: Mapping[int, PooledBackend] | None = None,
    history: Histories | None = None,
    built: int | None = None,
    on_purpose: HeldLocks | None = None,
    plan: RowPlan | None = None,
) -> Iterator[KeyGroup | Alike]:
    """The groups of every key worth checking, made one at a time as they are
    asked for: at 50,000 keys past their budget, holding every group at once
    was most of a poll's memory and its garbage collection most of its time.
    ``pooled`` names the backends a pooler hands out (by pid), ``on_purpose``
    the locks held on purpose (named by their library unless a named lock in
    the config covers the key); ``plan``, last poll's sorting of the rows,
    used again when it fits, changed by what changed since when it follows
    (and kept for the next poll).

    With ``built``, keys held alike by one session are one ``Alike``: the
    lowest key built, the next ``built`` - 1 listed, the rest counted: a
    session that took 50,000 locks in one go is one group's work, not 50,000."""
    pooled = pooled or {}
    rows = worth_checking(snapshot, settings, now, pooled, history)
    every = len(rows) == len(snapshot.locks)
    change = snapshot.lock_summary().change()
    if plan is not None and every and plan.fits(snapshot.locks, settings, on_purpose, built):
        sorted_rows = plan
    elif (
        plan is not None
        and every
        and change is not None
        and plan.fits(change.before, settings, on_purpose, built)
    ):
        _Sorter(plan, settings, on_purpose).follow(change, snapshot.locks)
        sorted_rows, plan.locks = plan, snapshot.locks
    else:
        sorted_rows = _sorted_rows(rows, settings, built, on_purpose)
        if plan is not None:
            plan.locks = snapshot.locks if every else None
            plan.settings, plan.on_purpose, plan.built = settings, on_purpose, built
            plan.keys, plan.ignored = sorted_rows.keys, sorted_rows.ignored
            plan.alike = sorted_rows.alike
    build = _Builder(snapshot, settings, now, pooled, history, on_purpose)
    for database, key, named, locks in sorted_rows.keys.values():
        yield build(database, key, named, locks)
    for lowest, count in sorted_rows.alike.values():
        group = build(lowest[0].database, lowest[0].key, None, lowest[:1])
        yield Alike(group, tuple(lowest[1:]), count - 1) if count > 1 else group


def _sorted_rows(
    rows: Sequence[AdvisoryLock],
    settings: LockSettings,
    built: int | None,
    on_purpose: HeldLocks | None,
) -> RowPlan:
    """The rows sorted into keys anew: the keys found through C, a Python
    step per key to place it."""
    row_keys = list(map(_ROW_KEY, rows))
    # A key's first row (the reversed pairs keep each key's first), and the
    # rows of keys with more than one: most keys have one.
    first_rows = dict(zip(reversed(row_keys), reversed(rows), strict=True))
    more_rows: dict[RowKey, list[AdvisoryLock]] = {}
    if len(first_rows) < len(rows):
        shared = {row for row, count in Counter(row_keys).items() if count > 1}
        for row, lock in zip(row_keys, rows, strict=True):
            if row in shared:
                more_rows.setdefault(row, []).append(lock)
    plan = RowPlan(built=built)
    sorter = _Sorter(plan, settings, on_purpose)
    members: dict[Shape, list[AdvisoryLock]] = {}
    for row, lock in first_rows.items():
        shape = sorter.place(row, more_rows.get(row) or [lock])
        if shape is not None:
            members.setdefault(shape, []).append(lock)
    for shape, held in members.items():
        assert built is not None  # only then are keys set aside as alike
        plan.alike[shape] = (heapq.nsmallest(built, held, key=_KEY_ORDER), len(held))
    return plan


class _Sorter:
    """Places keys in a plan: built on its own, ignored, or held alike."""

    def __init__(self, plan: RowPlan, settings: LockSettings, on_purpose: HeldLocks | None) -> None:
        self.plan = plan
        self.settings = settings
        self.on_purpose = on_purpose
        # Only a configured or catalogued key can be named or ignored: at 50,000
        # keys, asking the settings about each one was a tenth of a poll.
        self.configured = {named.key for named in settings.named} | set(settings.ignore)
        self.catalogued: dict[str, frozenset[LockKey]] = {}  # a database's: asked once
        # While following a change: the shapes whose lowest keys went, the
        # keys built on their own that lost a row.
        self.relist: set[Shape] = set()
        self.touched: set[RowKey] = set()

    def place(self, row: RowKey, locks: list[AdvisoryLock]) -> Shape | None:
        """Put the key's rows in the plan; the shape of keys it is held alike
        with (None: placed on its own, or ignored), for the caller to count."""
        database, key, settings, on_purpose = row[0], locks[0].key, self.settings, self.on_purpose
        known = self.catalogued.get(database)
        if known is None:
            known = self.catalogued[database] = settings.catalogued_keys(database)
        if (
            (self.configured and key in self.configured)
            or (on_purpose and (database, key) in on_purpose)
            or (known and key in known)
        ):
            if settings.ignored(database, key):
                self.plan.ignored[row] = locks
            else:
                named = settings.named_lock(database, key, on_purpose)
                self.plan.keys[row] = (database, key, named, locks)
            return None
        lock = locks[0]
        alike = len(locks) == 1 and lock.granted and lock.prepared is None
        if alike and self.plan.built is not None:
            return _SHAPE(lock)
        self.plan.keys[row] = (database, key, None, locks)
        return None

    def follow(self, change: LockChange[AdvisoryLock], locks: tuple[AdvisoryLock, ...]) -> None:
        """The plan of ``change.before`` made the plan of ``locks``: a Python
        step per row released or taken and per row of a key they share, and
        a pass over a session's rows for keys held alike whose lowest went."""
        plan = self.plan
        for lock in change.released:
            self._drop(lock)
        taken: dict[RowKey, list[AdvisoryLock]] = {}
        for lock in change.taken:
            taken.setdefault(_ROW_KEY(lock), []).append(lock)
        # A key held alike until now that a taken row shares is built on its
        # own: looked for (a pass through C) only when one may be, by
        # PostgreSQL's rules: a session waits on a key, or shares it, or takes
        # a key exclusively that it holds shared (no two sessions hold a key
        # exclusively, nor one shared and another exclusively).
        shared = {shape[1] for shape in plan.alike if shape[2] == _SHARED}
        firsts = {
            lock.key.first
            for lock in change.taken
            if not lock.granted or lock.mode == _SHARED or lock.pid in shared
        }
        new = set(map(id, change.taken)) if firsts else set()
        for lock in compress(locks, map(firsts.__contains__, map(_FIRST, locks))) if firsts else ():
            row = _ROW_KEY(lock)
            built_apart = row in plan.keys or row in plan.ignored  # their taken rows join them
            if row in taken and id(lock) not in new and not built_apart:
                self._drop(lock)
                taken[row].insert(0, lock)
        for row, rows in taken.items():
            entry = plan.keys.get(row)
            if entry is not None or row in plan.ignored:
                (plan.ignored[row] if entry is None else entry[3]).extend(rows)
            elif (shape := self.place(row, rows)) is not None:
                self._count(shape, rows[0])
        # A key built on its own for its rows, left with one: held alike, maybe.
        for row in self.touched:
            entry = plan.keys.get(row)
            if entry is not None and len(entry[3]) == 1:
                del plan.keys[row]
                if (shape := self.place(row, entry[3])) is not None:
                    self._count(shape, entry[3][0])
        self._relist(locks)

    def _drop(self, lock: AdvisoryLock) -> None:
        """A row no longer in the plan (released, or its key now shared)."""
        plan, row = self.plan, _ROW_KEY(lock)
        entry = plan.keys.get(row)
        rows = entry[3] if entry is not None else plan.ignored.get(row)
        if rows is not None:
            rows[:] = [held for held in rows if held is not lock]
            self.touched.add(row)
            if not rows:
                plan.keys.pop(row, None)
                plan.ignored.pop(row, None)
            return
        shape = _SHAPE(lock)
        lowest, count = plan.alike[shape]
        if count == 1:
            del plan.alike[shape]
            self.relist.discard(shape)
            return
        plan.alike[shape] = (lowest, count - 1)
        if any(held is lock for held in lowest):
            self.relist.add(shape)

    def _count(self, shape: Shape, lock: AdvisoryLock) -> None:
        """One more key held alike as ``shape``."""
        built = self.plan.built
        assert built is not None  # only then are keys set aside as alike
        lowest, count = self.plan.alike.get(shape, ([], 0))
        if shape not in self.relist and (
            len(lowest) < built or _KEY_ORDER(lock) < _KEY_ORDER(lowest[-1])
        ):
            lowest = heapq.nsmallest(built, [*lowest, lock], key=_KEY_ORDER)
        self.plan.alike[shape] = (lowest, count + 1)

    def _relist(self, locks: tuple[AdvisoryLock, ...]) -> None:
        """The lowest keys of each shape whose lowest went found anew, in a
        pass through C over the rows of its sessions."""
        relist = self.relist
        if not relist:
            return
        plan, built = self.plan, self.plan.built
        assert built is not None  # only then are keys set aside as alike
        members: dict[Shape, list[AdvisoryLock]] = {shape: [] for shape in relist}
        pids = {shape[1] for shape in relist}
        for lock in compress(locks, map(pids.__contains__, map(_PID, locks))):
            held = members.get(_SHAPE(lock))
            row = _ROW_KEY(lock)
            if held is not None and row not in plan.keys and row not in plan.ignored:
                held.append(lock)
        for shape, held in members.items():
            plan.alike[shape] = (heapq.nsmallest(built, held, key=_KEY_ORDER), len(held))


# A key's order, as plain values compared in C.
_KEY_ORDER = attrgetter("key.pair", "key.first", "key.second")
# A row's (database, key) as plain values, hashed in C, and the first of them.
_ROW_KEY = attrgetter("database", "key.pair", "key.first", "key.second")
_FIRST = attrgetter("key.first")
_FIRST_SEEN, _PID = attrgetter("first_seen"), attrgetter("pid")
_SHARED = "ShareLock"
_SHAPE = attrgetter("database", "pid", "mode", "first_seen", "session_level")


class _Builder:
    """Builds a key's group from its rows, each session's idle time reckoned once."""

    def __init__(
        self,
        snapshot: LockSnapshot,
        settings: LockSettings,
        now: datetime,
        pooled: Mapping[int, PooledBackend],
        history: Histories | None,
        on_purpose: HeldLocks | None,
    ) -> None:
        self.snapshot = snapshot
        self.settings = settings
        self.now = now
        self.pooled = pooled
        self.history = history
        self.on_purpose = on_purpose
        self._idle: dict[int, float | None] = {}  # one session holds many keys

    def __call__(
        self, database: str, key: LockKey, named: NamedLock | None, locks: list[AdvisoryLock]
    ) -> KeyGroup:
        now = self.now
        holders = []
        waiters = []
        for lock in locks:
            backend = self.snapshot.backends.get(lock.pid)
            if lock.granted:
                held = seconds_between(now, lock.first_seen)
                idle = None
                if lock.prepared is not None:
                    idle = held  # a prepared transaction runs no SQL, ever
                elif backend is not None and backend.state in IDLE_STATES:
                    if lock.pid not in self._idle:
                        self._idle[lock.pid] = seconds_between(now, backend.state_change)
                    idle = self._idle[lock.pid]
                holders.append(Holder(lock, backend, held, idle, self.pooled.get(lock.pid)))
            else:
                started = lock.wait_start or lock.first_seen
                waiters.append(Waiter(lock, backend, seconds_between(now, started)))
        if len(holders) > 1:
            holders.sort(key=lambda h: (h.lock.pid, h.lock.mode))
        if len(waiters) > 1:
            waiters.sort(key=lambda w: (-w.waited, w.lock.pid))
        past = None if self.history is None else self.history.get((database, key))
        learned = None if past is None else self.settings.learned_budget(past, now)
        known = self.settings.held_on_purpose(database, key, self.on_purpose)
        purpose = None if known is None else known.purpose
        return KeyGroup(
            database, key, named, tuple(holders), tuple(waiters), past, learned, purpose
        )
