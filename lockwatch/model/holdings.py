"""A poll's advisory locks per holder: how many each holds, its first keys,
the sessions waiting on it; carried over from one poll's locks to the next's
when they changed a little."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, not_
from typing import Protocol

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
        self, before: tuple[AdvisoryLock, ...], after: tuple[AdvisoryLock, ...]
    ) -> Holdings:
        """These holdings of ``before`` (locks all granted, none a prepared
        transaction's) carried over to ``after`` (so too): only the locks
        released and taken since take a Python step, and the holders whose
        listed keys were released a pass of their own. The hold tracker hands
        out the very same object for a lock held on, so identity tells them."""
        now_ids = set(map(id, after))
        then_ids = set(map(id, before))
        released = list(compress(before, map(not_, map(now_ids.__contains__, map(id, before)))))
        taken = list(compress(after, map(not_, map(then_ids.__contains__, map(id, after)))))
        if len(released) + len(taken) > len(after) // 2:
            return Holdings.of(after)  # most changed: a pass over them all costs no more
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
