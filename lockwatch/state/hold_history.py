"""Each key's completed holds and waits, kept small: a bounded quantile sketch,
histogram buckets and a few figures per key, for a bounded set of keys.

Which keys have a history of their own: every named lock (a key of the
catalogue is named too, unless the catalogue is off), and at most ``top_n`` others, first
come; an other key quiet for a whole learning period gives its place up to a
new one. Holds of keys past that go into one ``(other keys)`` history, so the
histograms count every hold with a bounded number of series. Ignored keys
are not recorded.

The quantiles come from a log-bucketed sketch (as DDSketch, Masson et al.,
VLDB 2019): written here rather than taken from the ``ddsketch`` package
because lockwatch keeps it in its JSON state file, which that package only
serialises through protobuf, and it is forty lines.

An ``auto`` budget is learned from a key's p99 as of the start of the
learning period in force (``KeyRecord.settle``), not the latest: holds
lengthened step by step, each just under the budget, would otherwise raise
it at every hold. A budget that rose more than ``RISE_REPORTED`` times over
one period is said in the log.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lockwatch.model.hold_history import (
    HISTOGRAM_BUCKETS,
    QUANTILE_ERROR,
    DurationStats,
    HistoryKey,
    KeyHistory,
)
from lockwatch.model.locks import LockKey
from lockwatch.settings.locks import MAX_HOLDER_CHANGES, LockRole, LockSettings
from lockwatch.state.holds import Ended, ObservationKey, _aware
from lockwatch.text import format_short_duration, one_line

log = logging.getLogger(__name__)

# ln of the sketch's bucket growth: bucket i holds (gamma^(i-1), gamma^i].
_GAMMA = (1 + QUANTILE_ERROR) / (1 - QUANTILE_ERROR)
_LN_GAMMA = math.log(_GAMMA)
# Durations below this (seconds) are counted as zero: a hold seen by one poll only.
MIN_DURATION = 1e-4
# Buckets per sketch: 5 % steps cover 1 ms .. 5 days in 200, and real keys
# span a few decades; past it the lowest buckets merge, which coarsens only
# the lowest quantiles.
MAX_BUCKETS = 200
# A key's p99 that grew more than this many times over one learning period is
# said in the log: its learned budget rose as much.
RISE_REPORTED = 2.0


class QuantileSketch:
    """Counts of durations in log-spaced buckets: any quantile within
    QUANTILE_ERROR (relative) of a true one, in at most MAX_BUCKETS buckets.

    >>> sketch = QuantileSketch()
    >>> for ms in range(1, 101):
    ...     sketch.add(ms / 1000)
    >>> abs(sketch.quantile(0.5) - 0.050) <= 0.050 * QUANTILE_ERROR + 1e-12
    True
    """

    __slots__ = ("buckets", "count", "zeros")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.zeros = 0
        self.count = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        if seconds < MIN_DURATION:
            self.zeros += 1
            return
        index = math.ceil(math.log(seconds) / _LN_GAMMA)
        self.buckets[index] = self.buckets.get(index, 0) + 1
        if len(self.buckets) > MAX_BUCKETS:
            lowest, second = sorted(self.buckets)[:2]
            self.buckets[second] += self.buckets.pop(lowest)

    def quantile(self, q: float) -> float:
        """The value of rank q x (count - 1), as a bucket's midpoint in relative terms."""
        if self.count == 0:
            return 0.0
        rank = q * (self.count - 1)
        seen = self.zeros
        if rank < seen:
            return 0.0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if rank < seen:
                return 2 * _GAMMA**index / (_GAMMA + 1)
        return 2 * _GAMMA ** max(self.buckets) / (_GAMMA + 1)

    def dump(self) -> dict[str, Any]:
        """Dense from the lowest bucket: a few hundred bytes for a key's sketch."""
        first = min(self.buckets, default=0)
        last = max(self.buckets, default=-1)
        counts = [self.buckets.get(i, 0) for i in range(first, last + 1)]
        return {"zeros": self.zeros, "first": first, "counts": counts}

    @classmethod
    def load(cls, document: Mapping[str, Any]) -> QuantileSketch:
        sketch = cls()
        sketch.zeros = int(document["zeros"])
        first = int(document["first"])
        counts = [int(n) for n in document["counts"]]
        buckets = {first + i: n for i, n in enumerate(counts) if n}
        if len(buckets) > MAX_BUCKETS or any(n < 0 for n in counts) or sketch.zeros < 0:
            raise ValueError("not a sketch lockwatch wrote")
        sketch.buckets = buckets
        sketch.count = sketch.zeros + sum(buckets.values())
        return sketch


@dataclass(slots=True)
class Durations:
    """The completed holds or waits of one key."""

    sketch: QuantileSketch = field(default_factory=QuantileSketch)
    buckets: list[int] = field(default_factory=lambda: [0] * len(HISTOGRAM_BUCKETS))
    total: float = 0.0
    longest: float = 0.0
    last: float = 0.0

    def add(self, seconds: float) -> None:
        self.sketch.add(seconds)
        for i, bound in enumerate(HISTOGRAM_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1
                break
        self.total += seconds
        self.longest = max(self.longest, seconds)
        self.last = seconds

    def stats(self) -> DurationStats | None:
        if self.sketch.count == 0:
            return None
        cumulative, running = [], 0
        for n in self.buckets:
            running += n
            cumulative.append(running)
        q = self.sketch.quantile
        return DurationStats(
            self.sketch.count,
            q(0.5),
            q(0.9),
            q(0.99),
            self.longest,
            self.last,
            self.total,
            tuple(cumulative),
        )

    def dump(self) -> dict[str, Any]:
        return {
            "sketch": self.sketch.dump(),
            "buckets": self.buckets,
            "total": self.total,
            "longest": self.longest,
            "last": self.last,
        }

    @classmethod
    def load(cls, document: Mapping[str, Any]) -> Durations:
        buckets = [int(n) for n in document["buckets"]]
        if len(buckets) != len(HISTOGRAM_BUCKETS):
            raise ValueError("histogram buckets changed")  # counts of other bounds mean nothing
        return cls(
            QuantileSketch.load(document["sketch"]),
            buckets,
            float(document["total"]),
            float(document["longest"]),
            float(document["last"]),
        )


Holder = tuple[int, str]  # pid, backend_start: one session


@dataclass(slots=True)
class KeyRecord:
    since: datetime
    last_at: datetime
    holds: Durations = field(default_factory=Durations)
    waits: Durations = field(default_factory=Durations)
    holder: Holder | None = None  # a leader lock's latest holder
    changes: deque[datetime] = field(default_factory=lambda: deque(maxlen=MAX_HOLDER_CHANGES))
    baseline: float | None = None  # the holds' p99 at the start of the period in force
    baseline_at: datetime | None = None  # when that period began

    def history(self, database: str, key: LockKey | None) -> KeyHistory:
        return KeyHistory(
            database,
            key,
            self.holds.stats(),
            self.waits.stats(),
            self.since,
            tuple(self.changes),
            self.baseline,
        )

    def settle(self, period: float, now: datetime) -> float | None:
        """Begin a new learning period once the one in force (from the first
        hold, at first) has lasted ``period``: the budget is learned from the
        p99 as of now until the next. The previous baseline when the new one
        is more than RISE_REPORTED times it, else None."""
        began = self.baseline_at or self.since
        if (now - began).total_seconds() < period or self.holds.sketch.count == 0:
            return None
        previous, self.baseline = self.baseline, self.holds.sketch.quantile(0.99)
        self.baseline_at = now
        return previous if previous and self.baseline > RISE_REPORTED * previous else None


class HoldHistory:
    """The completed holds and waits of one target's keys."""

    def __init__(self) -> None:
        self._records: dict[HistoryKey, KeyRecord] = {}
        self._plain: set[HistoryKey] = set()  # the records of keys not named
        self._others: KeyRecord | None = None
        self._changed: set[HistoryKey | None] = set()  # None: the other keys
        self._published: dict[HistoryKey, KeyHistory] = {}
        self._published_others: KeyHistory | None = None
        self._shown: tuple[KeyHistory, ...] = ()
        self._dirty = False  # recorded something since the last dump
        self._dumped: dict[str, Any] | None = None
        # While the top N are all busy, no plain key can give its place up
        # before this: a flood of new keys costs no search each.
        self._full_until: datetime | None = None
        self._settings: LockSettings | None = None  # the settings the records were sorted by

    @property
    def keys(self) -> Mapping[HistoryKey, KeyHistory]:
        """Each key's history as of the last update (kept between updates)."""
        return self._published

    def published(self) -> tuple[KeyHistory, ...]:
        """Every history by database and key, the other keys' last."""
        return self._shown

    def update(
        self,
        ended: Iterable[Ended],
        began: Iterable[ObservationKey],
        settings: LockSettings,
        now: datetime,
    ) -> None:
        """Record the holds and waits the tracker saw end, each from its first
        to its last sighting, and who took each leader lock anew."""
        if settings is not self._settings:
            self._resort(settings)
        for observed, first_seen, last_seen in ended:
            where = (observed[2], LockKey(observed[3], observed[4], observed[5]))
            record = self._record(where, settings, now)
            if record is not None:
                seconds = max((last_seen - first_seen).total_seconds(), 0.0)
                (record.holds if observed[7] else record.waits).add(seconds)
                record.last_at = now
                if observed[7]:
                    self._settle(where, record, settings, now)
        leaders = [n for n in settings.named if n.role is LockRole.LEADER and not n.ignore]
        for observed in began if leaders else ():
            key = LockKey(observed[3], observed[4], observed[5])
            if observed[7] and any(n.matches(observed[2], key) for n in leaders):
                self._holder_seen((observed[2], key), (observed[0], observed[1]), settings, now)
        if self._changed:
            self._publish()

    def _settle(
        self, where: HistoryKey, record: KeyRecord, settings: LockSettings, now: datetime
    ) -> None:
        learning = settings.learning
        previous = record.settle(learning.period, now)
        if previous is None or record.baseline is None:
            return
        lock = "(other keys)" if record is self._others else where[1].render()
        log.warning(
            "the holds of lock %s in database %s lengthened fast: p99 %s, %s a learning period "
            "ago; an auto budget learned from them rises from %s to %s (at most %s). If they "
            "are not meant to take longer, something is teaching lockwatch to wait",
            lock,
            one_line(where[0]),
            *(format_short_duration(record.baseline), format_short_duration(previous)),
            format_short_duration(max(learning.factor * previous, learning.floor)),
            format_short_duration(max(learning.factor * record.baseline, learning.floor)),
            format_short_duration(settings.learned_ceiling),
        )

    def _holder_seen(
        self, where: HistoryKey, holder: Holder, settings: LockSettings, now: datetime
    ) -> None:
        """A leader lock taken anew: a change of hands when another session (or
        the same pid after a reconnect) took it than last time."""
        record = self._record(where, settings, now)
        if record is None:
            return
        if record.holder is not None and record.holder != holder:
            record.changes.append(now)
        record.holder = holder

    def _record(self, where: HistoryKey, settings: LockSettings, now: datetime) -> KeyRecord | None:
        """The record a hold of ``where`` goes to (the other keys' one past the
        top N), made if need be; None for an ignored key."""
        record = self._records.get(where)
        if record is None:
            database, key = where
            if settings.ignored(database, key):
                return None
            if settings.named_lock(database, key) is None:
                if not self._make_room(settings, now):
                    if self._others is None:
                        self._others = KeyRecord(now, now)
                    self._changed.add(None)
                    self._dirty = True
                    return self._others
                self._plain.add(where)
            record = self._records[where] = KeyRecord(now, now)
        self._changed.add(where)
        self._dirty = True
        return record

    def _resort(self, settings: LockSettings) -> None:
        """After a restart or a reload: a key no longer named
        keeps its history as a plain key while there is room, and an ignored
        one loses it, so that no config history makes the records grow."""
        self._settings = settings
        self._full_until = None
        removed = False
        for where in list(self._records):
            database, key = where
            keep = settings.named_lock(database, key) is not None
            if settings.ignored(database, key) or (
                not keep and where not in self._plain and len(self._plain) >= settings.top_n
            ):
                self._plain.discard(where)
                del self._records[where]
                self._published.pop(where, None)
                removed = True
            elif keep:
                self._plain.discard(where)
            else:
                self._plain.add(where)
        if removed:
            self._dirty = True
            self._publish()

    def _make_room(self, settings: LockSettings, now: datetime) -> bool:
        """Whether another plain key may have a history: under top_n, or after
        the quietest one, quiet for a learning period, gives its place up."""
        if len(self._plain) < settings.top_n:
            return True
        if not self._plain or (self._full_until is not None and now < self._full_until):
            return False
        quietest = min(self._plain, key=lambda where: self._records[where].last_at)
        free_at = self._records[quietest].last_at + timedelta(seconds=settings.learning.period)
        if now < free_at:
            self._full_until = free_at
            return False
        self._plain.discard(quietest)
        del self._records[quietest]
        self._published.pop(quietest, None)
        return True

    def _publish(self) -> None:
        """Fresh frozen histories of the keys that changed, the rest kept."""
        for where in self._changed:
            if where is None:
                assert self._others is not None
                self._published_others = self._others.history("", None)
            elif where in self._records:
                self._published[where] = self._records[where].history(*where)
        self._changed = set()
        shown = [self._published[where] for where in sorted(self._published)]
        others = self._published_others
        self._shown = (*shown, others) if others is not None else tuple(shown)

    def dump(self) -> dict[str, Any]:
        """The records for the state file; the last dump again while nothing changed."""
        if self._dumped is None or self._dirty:
            records: list[tuple[HistoryKey | None, KeyRecord]] = list(self._records.items())
            if self._others is not None:
                records.append((None, self._others))
            self._dumped = {
                "keys": [_entry(where, where in self._plain, r) for where, r in records]
            }
            self._dirty = False
        return self._dumped

    def load(self, document: Mapping[str, Any]) -> None:
        """Restore a dump; a malformed entry is dropped, not guessed at."""
        for entry in list(document.get("keys") or ()):
            try:
                record = KeyRecord(
                    _aware(entry["since"]),
                    _aware(entry["last_at"]),
                    Durations.load(entry["holds"]),
                    Durations.load(entry["waits"]),
                    (int(entry["holder"][0]), str(entry["holder"][1]))
                    if entry.get("holder")
                    else None,
                    deque((_aware(m) for m in entry["changes"]), maxlen=MAX_HOLDER_CHANGES),
                    # an older lockwatch's state has none: learned again from the next period
                    None if entry.get("baseline") is None else float(entry["baseline"]),
                    None if entry.get("baseline_at") is None else _aware(entry["baseline_at"]),
                )
                key = None if entry["key"] is None else LockKey.parse(str(entry["key"]))
                database = str(entry["database"])
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            if key is None:
                self._others = record
                self._changed.add(None)
                continue
            self._records[database, key] = record
            self._changed.add((database, key))
            if entry.get("plain"):
                self._plain.add((database, key))
        self._publish()


def _entry(where: HistoryKey | None, plain: bool, record: KeyRecord) -> dict[str, Any]:
    return {
        "database": "" if where is None else where[0],
        "key": None if where is None else where[1].render(),
        "plain": plain,
        "since": record.since.isoformat(),
        "last_at": record.last_at.isoformat(),
        "holds": record.holds.dump(),
        "waits": record.waits.dump(),
        "holder": list(record.holder) if record.holder else None,
        "changes": [moment.isoformat() for moment in record.changes],
        "baseline": record.baseline,
        "baseline_at": None if record.baseline_at is None else record.baseline_at.isoformat(),
    }
