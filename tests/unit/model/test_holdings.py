"""The locks per holder carried over from one poll's locks to the next's
(``LockSummary.holdings`` with the last poll's summary) say what a pass over
the new locks says, and so do the summary's counts and the holders of the keys
asked about, and its lock table; the holders of a few keys are those a pass
finds."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.model.holdings import Holdings
from lockwatch.model.locks import AdvisoryLock, LockKey, LockSummary, LockTable
from tests.fixtures.snapshots import NOW

# (pid, database, key, mode): a small space, so that holders share keys and lose listed ones.
rows = st.tuples(
    st.integers(1, 4),
    st.sampled_from(["app", "jobs"]),
    st.integers(0, 12),
    st.sampled_from(["ExclusiveLock", "ShareLock"]),
)


def _locks(drawn: list[tuple[int, str, int, str]]) -> list[AdvisoryLock]:
    return [
        AdvisoryLock(database, LockKey.bigint(key), mode, True, pid)
        for pid, database, key, mode in dict.fromkeys(drawn)
    ]


@given(st.lists(rows, max_size=40), st.lists(st.booleans(), max_size=40), st.lists(rows))
def test_holdings_carried_over_a_change_are_those_made_anew(
    before_rows: list[tuple[int, str, int, str]],
    kept_flags: list[bool],
    taken_rows: list[tuple[int, str, int, str]],
) -> None:
    before = tuple(_locks(before_rows))
    # The tracker hands out the very same object for a lock held on.
    kept = [lock for lock, keep in zip(before, kept_flags, strict=False) if keep]
    after = tuple(kept + _locks(taken_rows))
    earlier = LockSummary.of(before)
    earlier.holdings()
    carried = LockSummary.of(after, earlier=earlier).holdings()
    made = Holdings.of(after)
    assert carried.held == made.held
    assert carried.waiting == made.waiting == {}


def test_a_listed_key_released_lists_the_holders_next_lowest() -> None:
    before = tuple(
        AdvisoryLock("app", LockKey.bigint(key), "ExclusiveLock", True, 7) for key in range(8)
    )
    earlier = LockSummary.of(before)
    assert earlier.holdings().held[(7, "")] == (8, ("app/0", "app/1", "app/2", "app/3", "app/4"))
    after = before[1:]
    carried = LockSummary.of(after, earlier=earlier).holdings()
    assert carried.held[(7, "")] == (7, ("app/1", "app/2", "app/3", "app/4", "app/5"))


def test_the_holders_of_keys_asked_about_are_those_holding_them() -> None:
    app1, app2 = ("app", LockKey.bigint(1)), ("app", LockKey.bigint(2))
    locks = (
        AdvisoryLock("app", LockKey.bigint(1), "ShareLock", True, 7),
        AdvisoryLock("app", LockKey.bigint(1), "ShareLock", True, 8),
        AdvisoryLock("app", LockKey.bigint(1), "ExclusiveLock", False, 9),
        AdvisoryLock("app", LockKey.bigint(3), "ExclusiveLock", True, 9),
    )
    summary = LockSummary.of(locks)
    assert summary.key_holders(frozenset({app1, app2})) == {app1: [(7, ""), (8, "")]}
    assert summary.key_holders(frozenset({app2})) == {}


# (pid, key, granted, minutes held, session level): waits, ties on the oldest and newest hold.
dated_rows = st.tuples(
    st.integers(1, 4), st.integers(0, 12), st.booleans(), st.integers(0, 3), st.booleans()
)


def _dated(drawn: list[tuple[int, int, bool, int, bool]]) -> list[AdvisoryLock]:
    return [
        AdvisoryLock(
            "app",
            LockKey.bigint(key),
            "ExclusiveLock",
            granted,
            pid,
            first_seen=NOW - timedelta(minutes=minutes),
            session_level=session,
        )
        for pid, key, granted, minutes, session in dict.fromkeys(drawn)
    ]


@given(
    st.lists(dated_rows, max_size=30),
    st.lists(st.booleans(), max_size=30),
    st.lists(dated_rows, max_size=6),
    st.sets(st.integers(0, 12), max_size=4),
)
def test_a_summary_carried_over_a_change_is_the_one_made_anew(
    before_rows: list[tuple[int, int, bool, int, bool]],
    kept_flags: list[bool],
    taken_rows: list[tuple[int, int, bool, int, bool]],
    asked: set[int],
) -> None:
    before = tuple(_dated(before_rows))
    kept = [lock for lock, keep in zip(before, kept_flags, strict=False) if keep]
    after = tuple(kept + _dated(taken_rows))
    keys = frozenset(("app", LockKey.bigint(key)) for key in asked)
    earlier = LockSummary.of(before)
    earlier.key_holders(keys)
    carried = LockSummary.of(after, earlier=earlier)
    made = LockSummary.of(after)
    assert carried == made
    holders = carried.key_holders(keys)
    assert {key: sorted(held) for key, held in holders.items()} == {
        key: sorted(held) for key, held in made.key_holders(keys).items()
    }


@settings(max_examples=300, deadline=None)
@given(
    st.lists(dated_rows, max_size=30),
    st.sets(st.integers(0, 29), max_size=4),
    st.lists(dated_rows, max_size=6),
    st.sampled_from(["app", "jobs"]),
)
def test_a_lock_table_carried_over_a_change_is_the_one_made_anew(
    before_rows: list[tuple[int, int, bool, int, bool]],
    released: set[int],
    taken_rows: list[tuple[int, int, bool, int, bool]],
    database: str,
) -> None:
    before = tuple(_dated(before_rows))
    kept = [lock for at, lock in enumerate(before) if at not in released]
    taken = [replace(lock, database=database) for lock in _dated(taken_rows)]
    after = tuple(kept + taken)
    earlier = LockSummary.of(before)
    earlier.table()
    assert LockSummary.of(after, earlier=earlier).table() == LockTable.of(after)
