"""A poll's advisory locks per holder: how many each holds, its first keys,
the sessions waiting on it; and what the lock summary counts (its pids, its
oldest and newest holds): both carried over from one poll's locks to the
next's by what changed (``LockChange``) when they changed a little."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Set
from dataclasses import dataclass
from datetime import datetime
from itertools import compress
from operator import attrgetter, not_
from typing import Generic, Protocol, TypeVar

from lockwatch.model.lock_waits import PreparedXact

HOLDINGS_LISTED = 5  # a holder's keys listed, the lowest (database, key) first
HolderOf = tuple[int, str]  # a holder: its pid, its prepared transaction's gid or ""


class _Key(Hashable, Protocol):
    """A ``LockKey`` as holdings read it (model/locks.py imports this module)."""

    def render(self) -> str: ...


class AdvisoryLock(Protocol):
    """An ``AdvisoryLock`` (model/locks.py) as holdings read it."""

    @property
    def database(self) -> str: ...
    @property
    def key(self) -> _Key: ...
    @property
    def pid(self) -> int: ...
    @property
    def granted(self) -> bool: ...
    @property
    def prepared(self) -> PreparedXact | None: ...
    @property
    def first_seen(self) -> datetime | None: ...
    @property
    def session_level(self) -> bool | None: ...


_Lock_co = TypeVar("_Lock_co", bound=AdvisoryLock, covariant=True)
_Held = TypeVar("_Held", bound=AdvisoryLock)


@dataclass(frozen=True, slots=True)
class LockChange(Generic[_Lock_co]):
    """How a poll's locks came from the last poll's (``before``): the very
    objects let go of, and those taken. The hold tracker hands out the very
    same object for a lock held on, so identity tells them apart."""

    before: tuple[_Lock_co, ...]
    released: tuple[_Lock_co, ...]
    taken: tuple[_Lock_co, ...]

    @staticmethod
    def between(before: tuple[_Held, ...], after: tuple[_Held, ...]) -> LockChange[_Held]:
        """Told by a pass over both, for a caller that was not told."""
        now_ids = set(map(id, after))
        then_ids = set(map(id, before))
        released = compress(before, map(not_, map(now_ids.__contains__, map(id, before))))
        taken = compress(after, map(not_, map(then_ids.__contains__, map(id, after))))
        return LockChange(before, tuple(released), tuple(taken))

    def few(self, after: int) -> bool:
        """Whether carrying over costs less than a pass over the ``after`` locks."""
        return len(self.released) + len(self.taken) <= after // 2


_PID, _FIRST_SEEN, _GRANTED, _PREPARED, _SESSION = (
    attrgetter(name) for name in ("pid", "first_seen", "granted", "prepared", "session_level")
)


@dataclass(frozen=True, slots=True)
class LockTally:
    """What the lock summary counts of a poll's locks: the locks of each
    pid, the session-level holds of each, the locks first seen at each
    moment (None: not seen), and whether any lock waits or is a prepared
    transaction's."""

    pids: Counter[int]
    session_pids: Counter[int]  # of the granted locks whose session_level is true
    firsts: Counter[datetime | None]  # few moments: locks are taken in runs
    unusual: bool

    @property
    def oldest(self) -> datetime | None:
        """The earliest first sighting (None: none)."""
        return min(filter(None, self.firsts), default=None)

    @property
    def newest(self) -> datetime | None:
        """The latest first sighting (None: none, or a lock has none)."""
        return None if None in self.firsts else max(filter(None, self.firsts), default=None)

    @classmethod
    def of(cls, locks: tuple[AdvisoryLock, ...]) -> LockTally:
        # Column by column through C (map, compress, Counter).
        pids = tuple(map(_PID, locks))
        granted = tuple(map(_GRANTED, locks))
        return cls(
            Counter(pids),
            Counter(compress(compress(pids, granted), compress(map(_SESSION, locks), granted))),
            Counter(map(_FIRST_SEEN, locks)),
            not all(granted) or any(map(_PREPARED, locks)),
        )

    def changed(
        self, change: LockChange[AdvisoryLock], after: tuple[AdvisoryLock, ...]
    ) -> LockTally:
        """This tally of ``change.before`` carried over to ``after``: a Python
        step per lock released or taken; a pass over ``after`` only when a
        wait or prepared transaction was there before."""
        released, taken = change.released, change.taken
        if self.unusual:
            return LockTally.of(after)
        pids, session_pids = Counter(self.pids), Counter(self.session_pids)
        firsts = Counter(self.firsts)
        for lock in released:
            pids[lock.pid] -= 1
            session_pids[lock.pid] -= bool(lock.granted and lock.session_level)
            firsts[lock.first_seen] -= 1
        pids.update(map(_PID, taken))
        session_pids.update(lock.pid for lock in taken if lock.granted and lock.session_level)
        firsts.update(map(_FIRST_SEEN, taken))
        return LockTally(
            +pids,  # without what no lock has now
            +session_pids,
            +firsts,
            any(not lock.granted or lock.prepared is not None for lock in taken),
        )


def rows_of(plain: Set[tuple[object, ...]], locks: tuple[_Held, ...]) -> Iterator[_Held]:
    """The locks of the ``plain`` (database, pair, first, second) keys, picked
    out through C: only they take a Python step."""
    return compress(locks, map(plain.__contains__, map(_KEY_ORDER, locks)))


def holder_of(lock: AdvisoryLock) -> HolderOf:
    return (lock.pid, "" if lock.prepared is None else lock.prepared.gid)


# A lock's place among its holder's: (database, key), as plain values compared in C.
_KEY_ORDER = attrgetter("database", "key.pair", "key.first", "key.second")


@dataclass(frozen=True, slots=True)
class Holdings:
    """A poll's locks per holder: how many each holds, its first keys, and
    the sessions waiting on any key it holds."""

    held: Mapping[HolderOf, tuple[int, tuple[str, ...]]]  # count, HOLDINGS_LISTED keys
    waiting: Mapping[HolderOf, frozenset[int]]
    # Each holder's lowest HOLDINGS_LISTED locks, lowest first: what ``held``
    # lists, kept to carry it over to the next poll's locks (``changed``).
    lowest: Mapping[HolderOf, list[AdvisoryLock]]

    @classmethod
    def of(cls, locks: tuple[AdvisoryLock, ...]) -> Holdings:
        rows: dict[HolderOf, list[AdvisoryLock]] = {}
        waits: dict[tuple[str, _Key], set[int]] = {}
        for lock in locks:
            if lock.granted:
                rows.setdefault(holder_of(lock), []).append(lock)
            else:
                waits.setdefault((lock.database, lock.key), set()).add(lock.pid)
        waiting: dict[HolderOf, frozenset[int]] = {}
        if waits:  # few: the keys someone waits on
            for lock in locks:
                pids = waits.get((lock.database, lock.key)) if lock.granted else None
                if pids:
                    holder = holder_of(lock)
                    waiting[holder] = waiting.get(holder, frozenset()) | pids
        lowest = {
            holder: heapq.nsmallest(HOLDINGS_LISTED, own, key=_KEY_ORDER)
            for holder, own in rows.items()
        }
        held = {holder: (len(own), _first_keys(lowest[holder])) for holder, own in rows.items()}
        return cls(held, waiting, lowest)

    def changed(
        self, change: LockChange[AdvisoryLock], after: tuple[AdvisoryLock, ...]
    ) -> Holdings:
        """These holdings of ``change.before`` (locks all granted, none a
        prepared transaction's) carried over to ``after`` (so too): only the
        locks released and taken take a Python step, and the holders whose
        listed keys were released a pass of their own."""
        released, taken = change.released, change.taken
        counts = {holder: count for holder, (count, _) in self.held.items()}
        lowest = dict(self.lowest)
        relist: set[HolderOf] = set()  # a listed lock released: list the holder anew
        for lock in released:
            holder = holder_of(lock)
            counts[holder] -= 1
            if any(listed is lock for listed in lowest[holder]):
                relist.add(holder)
        for lock in taken:
            holder = holder_of(lock)
            counts[holder] = counts.get(holder, 0) + 1
            if holder in relist:
                continue
            listed = lowest.get(holder, [])
            if len(listed) < HOLDINGS_LISTED or _KEY_ORDER(lock) < _KEY_ORDER(listed[-1]):
                lowest[holder] = heapq.nsmallest(HOLDINGS_LISTED, [*listed, lock], key=_KEY_ORDER)
        changed = {holder_of(lock) for lock in (*released, *taken)}
        if relist:  # one pass for them all, a Python step only for their locks
            rows: dict[HolderOf, list[AdvisoryLock]] = {holder: [] for holder in relist}
            pids = {pid for pid, _ in relist}
            for lock in compress(after, map(pids.__contains__, map(attrgetter("pid"), after))):
                rows[holder_of(lock)].append(lock)
            for holder, own in rows.items():
                lowest[holder] = heapq.nsmallest(HOLDINGS_LISTED, own, key=_KEY_ORDER)
        held = dict(self.held)
        for holder in changed:
            if counts[holder] > 0:
                held[holder] = (counts[holder], _first_keys(lowest[holder]))
            else:
                del held[holder], lowest[holder]
        return Holdings(held, {}, lowest)


def _first_keys(lowest: list[AdvisoryLock]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f"{lock.database}/{lock.key.render()}" for lock in lowest))
