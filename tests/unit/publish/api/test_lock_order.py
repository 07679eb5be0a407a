"""The locks shown longest-held first, found through the poll's lock table,
are the first of all the groups built and sorted the long way."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.locks import LockKey, LockSnapshot, LockSummary
from lockwatch.publish.api.locks import configured_keys, lock_counts, lock_groups
from lockwatch.settings.locks import LockSettings
from tests.fixtures.snapshots import NOW
from tests.unit.publish.metrics.test_locks import snapshots_with_settings

Order = tuple[float, int, str, LockKey]


@st.composite
def spread_snapshots(draw: st.DrawFn) -> tuple[LockSnapshot, LockSettings]:
    """Snapshots whose keys may also have rows in a database of their own."""
    snap, settings_ = draw(snapshots_with_settings())
    copies = [
        replace(lock, database="elsewhere", pid=lock.pid + 1000)
        for lock in snap.locks
        if draw(st.booleans())
    ]
    return replace(snap, locks=(*snap.locks, *copies)), settings_


def every_key_sorted(snap: LockSnapshot, now: datetime) -> list[tuple[Order, str, LockKey]]:
    """Each (database, key) with its order, from every row, sorted: the long way."""
    rows: dict[tuple[str, LockKey], list[tuple[float | None, bool]]] = {}
    for lock in snap.locks:
        age = None
        if lock.granted and lock.first_seen is not None:
            age = max(0.0, (now - lock.first_seen).total_seconds())
        rows.setdefault((lock.database, lock.key), []).append((age, lock.granted))
    keyed = []
    for (database, key), found in rows.items():
        hold = max((age for age, _ in found if age is not None), default=0.0)
        waiters = sum(1 for _, granted in found if not granted)
        keyed.append(((-hold, -waiters, database, key), database, key))
    return sorted(keyed)


# Renderings before, at and after the snapshot's own time: a hold first seen
# after ``now`` counts as 0 s, like one not known.
nows = st.sampled_from((0.0, 0.5, 30.0, -30.0, -2000.0)).map(lambda s: NOW + timedelta(seconds=s))


@settings(max_examples=300, deadline=None)
@given(spread_snapshots(), nows, st.integers(0, 6))
def test_the_top_keys_are_the_first_of_the_full_sort(
    case: tuple[LockSnapshot, LockSettings], now: datetime, top: int
) -> None:
    snap, settings_ = case
    configured = configured_keys(settings_)
    full = every_key_sorted(snap, now)
    shown = [(g.database, g.key) for g in lock_groups(snap, settings_, now, top=top)]
    plain = [(db, k) for _, db, k in full if k not in configured]
    assert [pair for pair in shown if pair[1] not in configured] == plain[:top]
    # The configured keys are all there, each where the full sort puts it.
    wanted = set(plain[:top]) | {(db, k) for _, db, k in full if k in configured}
    assert shown == [(db, k) for _, db, k in full if (db, k) in wanted]


@settings(max_examples=200, deadline=None)
@given(spread_snapshots(), nows, st.integers(0, 6))
def test_every_group_comes_in_the_full_sorts_order_with_its_times(
    case: tuple[LockSnapshot, LockSettings], now: datetime, skip: int
) -> None:
    snap, settings_ = case
    full = every_key_sorted(snap, now)
    groups = lock_groups(snap, settings_, now, skip=skip)
    assert [(g.database, g.key) for g in groups] == [(db, k) for _, db, k in full][skip:]
    assert [-(g.hold_seconds or 0.0) for g in groups] == [order[0] for order, _, _ in full][skip:]


@settings(max_examples=100, deadline=None)
@given(spread_snapshots())
def test_a_table_kept_on_the_summary_answers_like_a_fresh_one(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    snap, settings_ = case
    kept = LockSnapshot(
        snap.target, snap.taken_at, 180001, snap.locks, summary=LockSummary.of(snap.locks)
    )
    assert kept.lock_table() is kept.lock_table()
    assert lock_counts(kept, settings_) == lock_counts(snap, settings_)
    assert lock_groups(kept, settings_, NOW, top=2) == lock_groups(snap, settings_, NOW, top=2)


@settings(max_examples=200, deadline=None)
@given(spread_snapshots())
def test_the_counts_per_database_are_those_of_every_row_not_ignored(
    case: tuple[LockSnapshot, LockSettings],
) -> None:
    snap, settings_ = case
    expected: dict[str, tuple[int, int]] = {}
    for lock in snap.locks:
        if not settings_.ignored(lock.database, lock.key):
            held, waiting = expected.get(lock.database, (0, 0))
            expected[lock.database] = (held + lock.granted, waiting + (not lock.granted))
    assert lock_counts(snap, settings_) == expected
