"""What lockwatch has learned of each key's past holds and waits, as of one poll.

A completed hold lasted from the first to the last poll that saw it (so it is
known to within one poll interval either way); holds too short for two polls
to see count as 0 s. The detectors judge a key against these facts
(``max_hold: auto``, leader churn), the metrics export them as histograms and
the API and the page show their summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lockwatch.model.locks import LockKey

# The histogram buckets (seconds, ``le``): from milliseconds to a day, so the
# holds of a migration lock and of a nightly job's lock both fall inside.
HISTOGRAM_BUCKETS: tuple[float, ...] = (
    0.005,
    0.05,
    0.25,
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4 * 3600.0,
    86400.0,
)

# The relative error of the learned quantiles (state/hold_history.py).
QUANTILE_ERROR = 0.05

# The holds of keys with no history of their own (past the top N), as one.
OTHER_KEYS = "(other keys)"


@dataclass(frozen=True, slots=True)
class DurationStats:
    """The completed holds (or waits) of one key, in seconds.

    The quantiles come from a bounded sketch: each is within QUANTILE_ERROR
    (relative) of a true quantile of the recorded durations.
    """

    count: int
    p50: float
    p90: float
    p99: float
    longest: float
    last: float
    total: float  # the sum of all of them, for the histogram's _sum
    buckets: tuple[int, ...]  # how many fell at or below each HISTOGRAM_BUCKETS bound


@dataclass(frozen=True, slots=True)
class KeyHistory:
    """One (database, key)'s past: its holds and waits and, for a leader
    lock, when its holder changed (the latest few)."""

    database: str
    key: LockKey | None  # None: the other keys without a history of their own
    holds: DurationStats | None
    waits: DurationStats | None
    since: datetime  # when the first of them was recorded: the learning began
    holder_changes: tuple[datetime, ...] = ()
    # The p99 of the holds as of the start of the learning period in force
    # (None before the first period ended): what an auto budget is learned
    # from, so that holds lengthened step by step within a period cannot
    # raise the budget they are judged by.
    baseline: float | None = None

    @property
    def lock(self) -> str:
        return OTHER_KEYS if self.key is None else self.key.render()


HistoryKey = tuple[str, LockKey]  # (database, key)
