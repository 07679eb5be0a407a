"""When a queue's reading is too old to show or judge: its source has not
answered for :data:`STALE_INTERVALS` of its intervals. A frozen backlog on a
page or in ``/metrics`` is worse than none (a gauge frozen at 494 jobs made a
40-minute false incident for engram-app/Engram#1497): a stale queue shows as
unknown, with the time it was last observed; no finding is made from it (open
ones stay undecided: nobody knows whether they cleared), and the source's own
``target_down`` says which source and why."""

from __future__ import annotations

from datetime import datetime

STALE_INTERVALS = 3


def is_stale(observed_at: datetime | None, now: datetime, interval: float) -> bool:
    """Whether a reading observed at ``observed_at`` is too old at ``now``.

    >>> from datetime import UTC, timedelta
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> is_stale(at, at + timedelta(seconds=30), 10.0), is_stale(at, at + timedelta(seconds=31), 10.0)
    (False, True)
    >>> is_stale(None, at, 10.0)
    True
    """
    if observed_at is None:
        return True
    return (now - observed_at).total_seconds() > STALE_INTERVALS * interval
