"""A quiet target's keys found one by one (``GrantedLocks``) are the poll's
lock table's, in its order, with its counts, however the keys collide and
whenever they are asked for."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.locks import LockKey, LockSnapshot, LockTable
from lockwatch.publish.api.locks import lock_counts, lock_groups
from lockwatch.publish.metrics.granted_locks import GrantedLocks
from lockwatch.settings.locks import LockSettings, NamedLock
from tests.fixtures.snapshots import DB, NOW, held, key, lock_snapshots, snapshot, waiting
from tests.unit.publish.api.test_lock_order import nows

# Keys sharing their first number (a bigint and pairs): found by that number
# first, they must still be told apart.
colliding_keys = st.sampled_from(
    (LockKey.bigint(7), LockKey.int_pair(7, 1), LockKey.int_pair(7, 2), LockKey.bigint(8))
)


@st.composite
def granted_snapshots(draw: st.DrawFn) -> tuple[LockSnapshot, LockSettings]:
    """Snapshots with every lock granted, some keys in two databases, and
    settings naming or ignoring some of their keys."""
    snap = draw(lock_snapshots(keys=colliding_keys, max_age=1000.0, waiters=False))
    copies = [
        replace(lock, database="elsewhere", pid=lock.pid + 1000)
        for lock in snap.locks
        if draw(st.booleans())
    ]
    snap = replace(snap, locks=(*snap.locks, *copies))
    keys = st.lists(colliding_keys, unique=True, max_size=3)
    named = tuple(
        NamedLock(
            f"lock-{n}",
            key,
            database=draw(st.sampled_from((None, DB))),
            ignore=draw(st.booleans()),
        )
        for n, key in enumerate(draw(keys))
    )
    return snap, LockSettings(top_n=4, ignore=tuple(draw(keys)), named=named)


@settings(max_examples=300, deadline=None)
@given(granted_snapshots(), nows, st.integers(0, 5))
def test_the_groups_and_counts_are_the_lock_tables(
    case: tuple[LockSnapshot, LockSettings], now: datetime, top: int
) -> None:
    snap, settings_ = case
    granted = GrantedLocks.of(snap)
    assert granted is not None
    assert lock_counts(snap, settings_, granted) == lock_counts(snap, settings_)
    assert lock_groups(snap, settings_, now, top=top, table=granted) == lock_groups(
        snap, settings_, now, top=top
    )


@settings(max_examples=200, deadline=None)
@given(granted_snapshots(), st.lists(nows, min_size=1, max_size=4), st.integers(0, 6))
def test_kept_from_scrape_to_scrape_it_answers_like_a_fresh_table(
    case: tuple[LockSnapshot, LockSettings], scrapes: list[datetime], depth: int
) -> None:
    snap, _ = case
    kept = GrantedLocks.of(snap)
    assert kept is not None
    for now in scrapes:  # each scrape reads as far as it needs, later ones further or less
        assert GrantedLocks.of(snap, kept) is kept
        assert (
            list(kept.longest_held(now))[:depth]
            == list(LockTable.of(snap.locks).longest_held(now))[:depth]
        )
    assert list(kept.longest_held(scrapes[-1])) == list(
        LockTable.of(snap.locks).longest_held(scrapes[-1])
    )


def test_a_wait_or_new_locks_are_not_answered_from_what_was_kept() -> None:
    quiet = snapshot(held(1, 10, held_for=5), held(2, 11, held_for=9))
    kept = GrantedLocks.of(quiet)
    assert kept is not None
    assert GrantedLocks.of(snapshot(*quiet.locks, waiting(1, 12)), kept) is None
    changed = GrantedLocks.of(snapshot(*quiet.locks), kept)
    assert changed is not None and changed is not kept
    assert [rows.key for rows in changed.longest_held(NOW)] == [key(2), key(1)]
