"""Which keys of a snapshot are worth checking, and their groups: the rows of
one (database, key) with what the settings say about it, made one at a time
(at 50,000 keys past their budget, all at once was most of a poll)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import compress
from operator import attrgetter, not_

from lockwatch.detect.evidence import seconds_between
from lockwatch.detect.lock_groups import Histories, Holder, KeyGroup, Waiter
from lockwatch.model.catalogue import HeldLocks
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
) -> list[AdvisoryLock]:
    """The rows of every key that could raise a finding.

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
        return list(snapshot.locks)  # every holder is past a negative budget
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
        return list(snapshot.locks)  # a flood: every row is kept
    return [lock for lock in snapshot.locks if (lock.database, lock.key) in loud]


def _told_by_hold_times(
    locks: tuple[AdvisoryLock, ...],
    summary: LockSummary,
    held_before: datetime,
    suspects: set[int],
) -> list[AdvisoryLock] | None:
    """worth_checking's loop (no key named) when hold times alone tell: a
    steady flood (every row held since before ``held_before``), or every lock
    granted, seen and none a suspect's, no key with a row held for less (a
    flood with a few new locks): the rows held past, told column by column
    through C. None when the loop must tell."""
    if summary.newest is not None and summary.newest < held_before:
        return list(locks)  # a steady flood: every row held past a budget
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


@dataclass(slots=True)
class RowPlan:
    """A poll's rows worth checking sorted into keys: those built on their
    own, and the sets of keys held alike (the lowest rows, and how many more).
    The lock monitor keeps it, and it is used again while every row is worth
    checking, the locks are the very same tuple and the settings and the locks
    held on purpose are the same: a steady flood sorts its 50,000 rows once."""

    locks: tuple[AdvisoryLock, ...] | None = None  # None: not to be used again
    settings: LockSettings | None = None
    on_purpose: HeldLocks | None = None
    built: int | None = None
    keys: list[KeyRowsOf] = field(default_factory=list)
    # keys held alike: the lowest rows (as many as ``built``), and how many in all
    alike: list[tuple[list[AdvisoryLock], int]] = field(default_factory=list)

    def fits(
        self,
        locks: tuple[AdvisoryLock, ...],
        settings: LockSettings,
        on_purpose: HeldLocks | None,
        built: int | None,
    ) -> bool:
        return (
            self.locks is locks
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
    used again when it fits (and kept for the next poll).

    With ``built``, keys held alike by one session are one ``Alike``: the
    lowest key built, the next ``built`` - 1 listed, the rest counted: a
    session that took 50,000 locks in one go is one group's work, not 50,000."""
    pooled = pooled or {}
    rows = worth_checking(snapshot, settings, now, pooled, history)
    every = len(rows) == len(snapshot.locks)
    if plan is not None and every and plan.fits(snapshot.locks, settings, on_purpose, built):
        sorted_rows = plan
    else:
        sorted_rows = _sorted_rows(rows, settings, built, on_purpose)
        if plan is not None:
            plan.locks = snapshot.locks if every else None
            plan.settings, plan.on_purpose, plan.built = settings, on_purpose, built
            plan.keys, plan.alike = sorted_rows.keys, sorted_rows.alike
    build = _Builder(snapshot, settings, now, pooled, history, on_purpose)
    for database, key, named, locks in sorted_rows.keys:
        yield build(database, key, named, locks)
    for lowest, count in sorted_rows.alike:
        group = build(lowest[0].database, lowest[0].key, None, lowest[:1])
        yield Alike(group, tuple(lowest[1:]), count - 1) if count > 1 else group


def _sorted_rows(
    rows: list[AdvisoryLock],
    settings: LockSettings,
    built: int | None,
    on_purpose: HeldLocks | None,
) -> RowPlan:
    # A key's first row, and the rows of keys with more than one: most keys
    # have one, and a list for each was a tenth of a flood's memory.
    first_rows: dict[tuple[str, LockKey], AdvisoryLock] = {}
    more_rows: dict[tuple[str, LockKey], list[AdvisoryLock]] = {}
    for lock in rows:
        row = (lock.database, lock.key)
        first = first_rows.setdefault(row, lock)
        if first is not lock:
            more_rows.setdefault(row, [first]).append(lock)
    # Only a configured or catalogued key can be named or ignored: at 50,000
    # keys, asking the settings about each one was a tenth of a poll.
    configured = {named.key for named in settings.named} | set(settings.ignore)
    catalogued: dict[str, frozenset[LockKey]] = {}  # a database's: asked once per poll
    keys: list[KeyRowsOf] = []
    alike: dict[tuple[object, ...], list[AdvisoryLock]] = {}
    for (database, key), lock in first_rows.items():
        locks = more_rows.get((database, key)) or [lock]
        known = catalogued.get(database)
        if known is None:
            known = catalogued[database] = settings.catalogued_keys(database)
        if (
            (configured and key in configured)
            or (on_purpose and (database, key) in on_purpose)
            or (known and key in known)
        ):
            if not settings.ignored(database, key):
                keys.append((database, key, settings.named_lock(database, key, on_purpose), locks))
            continue
        if built is not None and len(locks) == 1 and lock.granted and lock.prepared is None:
            shape = (database, lock.pid, lock.mode, lock.first_seen, lock.session_level)
            alike.setdefault(shape, []).append(lock)
        else:
            keys.append((database, key, None, locks))
    plan = RowPlan(keys=keys)
    for locks in alike.values():
        assert built is not None  # only then are keys set aside as alike
        lowest = heapq.nsmallest(built, locks, key=_KEY_ORDER)
        plan.alike.append((lowest, len(locks)))
    return plan


# A key's order, as plain values compared in C.
_KEY_ORDER = attrgetter("key.pair", "key.first", "key.second")
# A row's (database, key) as plain values, hashed in C.
_ROW_KEY = attrgetter("database", "key.pair", "key.first", "key.second")
_FIRST_SEEN = attrgetter("first_seen")


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
