"""Prometheus metrics of the waits on locks of other locktypes than advisory
(relations, rows, transaction ids, ...), rendered from the board: per target
and locktype, which the server names from a fixed set, so the series stay
bounded whatever the clients do. A target with no such wait has none."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

from lockwatch.publish.metrics.families import Exposition, Family
from lockwatch.state.target_view import TargetView


def lock_wait_metrics(
    views: Iterable[TargetView], now: datetime, scrape: Exposition
) -> Iterator[Family]:
    labels = ["target", "locktype"]
    waiting = scrape.gauge(
        "lockwatch_lock_waiting_sessions",
        "Sessions waiting on a lock of this locktype (not advisory) at the last poll.",
        labels,
    )
    longest = scrape.gauge(
        "lockwatch_lock_wait_longest_seconds",
        "How long the longest of them has waited (0 where the server does not date waits).",
        labels,
    )
    seconds = scrape.counter(
        "lockwatch_lock_waiter_seconds",
        "Seconds sessions spent waiting on locks of this locktype (not advisory) since lockwatch "
        "started, per database and relation (a target's first 20 relations, the rest as "
        "'(other)'; '' where the wait names none).",
        ["target", "database", "locktype", "relation"],
    )
    for view in views:
        for (database, locktype, relation), total in sorted(view.lock_waiter_seconds.items()):
            seconds.add((view.target.name, database, locktype, relation), total)
        snapshot = None if view.status is None else view.status.snapshot
        if snapshot is None or not snapshot.waits:
            continue
        counts: dict[str, int] = {}
        longest_by_type: dict[str, float] = {}
        for wait in snapshot.waits:
            counts[wait.locktype] = counts.get(wait.locktype, 0) + 1
            waited = 0.0 if wait.wait_start is None else (now - wait.wait_start).total_seconds()
            longest_by_type[wait.locktype] = max(longest_by_type.get(wait.locktype, 0.0), waited)
        for locktype, count in sorted(counts.items()):
            names = (view.target.name, locktype)
            waiting.add(names, count)
            longest.add(names, max(0.0, longest_by_type[locktype]))
    yield from (waiting, longest, seconds)
