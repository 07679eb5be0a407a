"""A queue's throughput, minute by minute, and its learned normal while work
waited (``queue_capacity_lost``). Bounded: the minutes of the learning period
that had work waiting all through (at most one a minute), and the latest
minutes of the judging window. The latest day of the saturated minutes is
saved with the target's state (``dump``/``load``), so a restart keeps the
normal it learned instead of learning it again for an hour."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from lockwatch.model.queues import QueueMinute, QueueSample, ThroughputNormal

MINUTE = timedelta(minutes=1)
# Saturated minutes a state file keeps per queue: a day of them, enough for
# any capacity_min_minutes up to 1440 and about 50 KB of JSON.
KEPT_MINUTES = 1440
# A saved minute: start (epoch seconds), completed, depth first, last and
# least, the oldest item's age, busy slots and consumers at its end.
SavedMinute = list[float | int | None]


class QueueThroughput:
    """One queue's readings folded into minutes."""

    def __init__(self, learning: float, window: float) -> None:
        self._learning = learning
        self._saturated: deque[QueueMinute] = deque(maxlen=max(1, int(learning // 60) + 1))
        self._recent: deque[QueueMinute] = deque(maxlen=max(1, int(window // 60) + 1))
        self._open: list[QueueSample] = []
        self._last_total: int | None = None
        self._normal: ThroughputNormal | None = None

    def add(self, sample: QueueSample) -> None:
        """Fold one reading in; a minute closes at the first reading a minute
        after its own first."""
        if self._open and sample.at - self._open[0].at >= MINUTE:
            self._close(sample.at)
        self._open.append(sample)
        self._forget_before(sample.at)

    def _forget_before(self, now: datetime) -> None:
        """Leave out the saturated minutes past the learning period."""
        while self._saturated and (now - self._saturated[0].start).total_seconds() > self._learning:
            self._saturated.popleft()
            self._normal = None

    def _close(self, now: datetime) -> None:
        samples, self._open = self._open, []
        completed = 0
        for sample in samples:
            total = sample.completed_total
            if total is not None and self._last_total is not None:
                completed += max(0, total - self._last_total)
            self._last_total = total
        last = samples[-1]
        minute = QueueMinute(
            start=samples[0].at,
            completed=completed,
            depth_first=samples[0].depth,
            depth_last=last.depth,
            depth_min=min(s.depth for s in samples),
            oldest_age_last=last.oldest_age_seconds,
            in_flight_last=last.in_flight,
            consumers_last=last.consumers,
        )
        if last.completed_total is None:
            self._recent.clear()  # no completions told: nothing to judge
            return
        self._recent.append(minute)
        if minute.depth_min > 0:
            self._saturated.append(minute)
        self._normal = None  # learned again when asked

    def dump(self) -> list[SavedMinute]:
        """The latest saturated minutes, oldest first, as JSON-ready rows."""
        kept = list(self._saturated)[-KEPT_MINUTES:]
        return [
            [
                round(m.start.timestamp(), 3),
                m.completed,
                m.depth_first,
                m.depth_last,
                m.depth_min,
                m.oldest_age_last,
                m.in_flight_last,
                m.consumers_last,
            ]
            for m in kept
        ]

    def load(self, rows: object) -> None:
        """Take back what ``dump`` gave, before any reading of this run (whose
        first reading leaves out the minutes past the learning period); a row
        that is not a minute is left out (a state file is read, never trusted)."""
        if self._saturated or self._open or not isinstance(rows, list):
            return
        for row in rows:
            minute = _saved_minute(row)
            if minute is not None:
                self._saturated.append(minute)
        self._normal = None

    def same_periods(self, other: QueueThroughput) -> bool:
        """Whether ``other`` learns and judges over the same periods (what a
        config reload may hand over)."""
        return (self._learning, self._recent.maxlen) == (other._learning, other._recent.maxlen)

    def recent(self) -> tuple[QueueMinute, ...]:
        return tuple(self._recent)

    def normal(self, min_minutes: int, excluding: int) -> ThroughputNormal | None:
        """The median saturated minute of the learning period, leaving out the
        latest ``excluding`` ones (the window being judged); None while fewer
        than ``min_minutes`` are known."""
        if self._normal is None:
            minutes = list(self._saturated)[: max(0, len(self._saturated) - excluding)]
            if len(minutes) < min_minutes:
                return None
            self._normal = ThroughputNormal(
                float(statistics.median(m.completed for m in minutes)),
                len(minutes),
                _median(m.in_flight_last for m in minutes),
                _median(m.consumers_last for m in minutes),
            )
        return self._normal


def _median(values: Iterable[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def _saved_minute(row: object) -> QueueMinute | None:
    if not isinstance(row, list) or len(row) != 8:
        return None
    start, completed, first, last, least, oldest, in_flight, consumers = row
    counts = (completed, first, last, least)
    if not isinstance(start, int | float) or not all(_whole(v) for v in counts):
        return None
    if not all(v is None or _whole(v) for v in (in_flight, consumers)):
        return None
    if oldest is not None and (isinstance(oldest, bool) or not isinstance(oldest, int | float)):
        return None
    return QueueMinute(
        datetime.fromtimestamp(start, UTC),
        completed,
        first,
        last,
        least,
        None if oldest is None else float(oldest),
        in_flight,
        consumers,
    )


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
