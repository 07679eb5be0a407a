"""A quiet target's locks per key, found for the few keys a scrape exports.

A scrape exports a quiet target's lock counts, its named locks and its
longest-held key. The poll's lock table (``model/locks.LockTable``) groups
every lock per key, made once per poll whose locks changed: at 1,000
targets of 100 locks whose locks all changed since the last scrape, making
them was 90 % of the scrape (300 ms). When every lock is granted (no wait,
no prepared transaction), those few keys are found without grouping the
rest: the counts per database in one pass through C, a key's rows by
comparing one column in C, and the longest-held keys from a heap of the
locks' first sightings, popped only as far as the scrape reads. The rows
are the lock table's own (``tests/unit/publish/metrics/test_granted_locks.py``
holds them to it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from heapq import heapify, heappop
from itertools import compress, islice, repeat
from operator import attrgetter, eq

from lockwatch.model.locks import AdvisoryLock, KeyRows, LockKey, LockSnapshot, LockTable

_DATABASE = attrgetter("database")
_KEY_FIRST = attrgetter("key.first")
_FIRST_SEEN = attrgetter("first_seen")
# A lock's place among the longest held: the order of the lock table's keys
# when nobody waits (first hold, then database and key).
_PLACE = attrgetter("first_seen", "database", "key")


class GrantedLocks:
    """The lock table's answers for locks that are all granted, each found
    when asked: ``counts``, ``rows(key)`` and ``longest_held(now)``. Kept
    from scrape to scrape while the locks stay the same tuple (one reader at
    a time: the keys found so far are kept in order)."""

    __slots__ = ("_found", "_heap", "_order", "_rows", "counts", "locks")

    def __init__(self, locks: tuple[AdvisoryLock, ...]) -> None:
        self.locks = locks
        self.counts = {
            database: (held, 0) for database, held in Counter(map(_DATABASE, locks)).items()
        }
        self._rows: dict[LockKey, tuple[KeyRows, ...]] = {}
        # The keys found longest-held first so far, each with its first hold,
        # and, while a scrape reads them, the locks' first sightings in a heap.
        self._order: list[tuple[datetime, KeyRows]] = []
        self._found: set[tuple[str, LockKey]] = set()
        self._heap: list[tuple[datetime, str, LockKey]] | None = None

    @classmethod
    def of(cls, snapshot: LockSnapshot, kept: GrantedLocks | None = None) -> GrantedLocks | None:
        """``kept`` again when it has the snapshot's locks; None when a lock
        waits or is a prepared transaction's: the lock table's order then
        depends on what every key's waiters are."""
        if kept is not None and kept.locks is snapshot.locks:
            return kept
        return None if snapshot.lock_summary().unusual else cls(snapshot.locks)

    def rows(self, key: LockKey) -> tuple[KeyRows, ...]:
        """The key's rows, one per database it has locks in."""
        found = self._rows.get(key)
        if found is None:
            # The locks of every key with its first number (a bigint and its
            # pairs, say), grouped per key: the table tells them apart.
            locks = self.locks
            near = compress(locks, map(eq, repeat(key.first), map(_KEY_FIRST, locks)))
            found = LockTable.of(tuple(near)).rows(key)
            self._rows[key] = found
        return found

    def longest_held(self, now: datetime) -> Iterator[KeyRows]:
        """Every key in the lock table's order as of ``now``: those first held
        before ``now`` popped from the heap, the rest (held since ``now``, or
        with no known hold) from the lock table, made only if asked for."""
        shown = 0
        try:
            while shown < len(self._order) or self._pop(now):
                first, rows = self._order[shown]
                if first >= now:
                    break
                shown += 1
                yield rows
        finally:
            # The keys found are kept, the heap not (a lock's worth each): a
            # later scrape reads no further than this one did, mostly.
            self._heap = None
        yield from islice(LockTable.of(self.locks).longest_held(now), shown, None)

    def _pop(self, now: datetime) -> bool:
        """Finds the next key first held before ``now``; False when none is left
        (the keys found already are passed over when the heap is made again)."""
        if self._heap is None:
            self._heap = list(map(_PLACE, filter(_FIRST_SEEN, self.locks)))
            heapify(self._heap)
        heap = self._heap
        while heap and heap[0][0] < now:
            first, database, key = heappop(heap)
            if (database, key) not in self._found:
                self._found.add((database, key))
                rows = next(rows for rows in self.rows(key) if rows.database == database)
                self._order.append((first, rows))
                return True
        return False
