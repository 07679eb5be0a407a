"""How late polls start: a cumulative histogram of the seconds between a
poll's due time and the moment a poller began it, for the whole process."""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

# From "on time" to "a whole short interval late": where a busy or stalled
# process shows first.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True)
class LatenessCounts:
    """A reading of the histogram: per bucket bound, the polls at most that late."""

    cumulative: tuple[tuple[float, int], ...]
    count: int
    total_seconds: float


class Lateness:
    """Counts each poll's start lateness into fixed buckets; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets = [0] * len(BUCKETS)  # polls in (previous bound, bound]
        self._count = 0
        self._total = 0.0

    def observe(self, seconds: float) -> None:
        late = max(0.0, seconds)  # a poller that starts a hair early is on time
        index = bisect.bisect_left(BUCKETS, late)
        with self._lock:
            if index < len(BUCKETS):
                self._buckets[index] += 1
            self._count += 1
            self._total += late

    def counts(self) -> LatenessCounts:
        with self._lock:
            buckets, count, total = list(self._buckets), self._count, self._total
        running, cumulative = 0, []
        for bound, polls in zip(BUCKETS, buckets, strict=True):
            running += polls
            cumulative.append((bound, running))
        return LatenessCounts(tuple(cumulative), count, total)
