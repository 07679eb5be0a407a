"""Who blocks whom, from synthetic pg_locks rows, by PostgreSQL's conflict table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.lock_waits import (
    CONFLICTS,
    MODES,
    LockRowFact,
    LockTreeNode,
    conflicts,
    lock_forest,
    lock_waits,
    roots_of,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TABLE = "relation:5:16384::::::::"


def held(pid: int, mode: str, tag: str = TABLE) -> LockRowFact:
    return LockRowFact(pid, tag.partition(":")[0], tag, mode, True, relation="jobs")


def waits(pid: int, mode: str, second: int, tag: str = TABLE) -> LockRowFact:
    return LockRowFact(
        pid, tag.partition(":")[0], tag, mode, False, T0 + timedelta(seconds=second), "jobs"
    )


def test_the_conflict_table_is_symmetric_as_postgresql_s_is() -> None:
    for mode, others in CONFLICTS.items():
        for other in others:
            assert mode in CONFLICTS[other]
    assert CONFLICTS["AccessExclusiveLock"] == frozenset(MODES)
    assert CONFLICTS["AccessShareLock"] == {"AccessExclusiveLock"}
    assert not conflicts("RowExclusiveLock", "RowShareLock")


def test_an_alter_behind_a_reader_queues_every_later_reader_behind_itself() -> None:
    rows = [
        held(1, "AccessShareLock"),  # idle in transaction after a SELECT
        waits(2, "AccessExclusiveLock", 10),  # ALTER TABLE
        waits(3, "AccessShareLock", 11),
        waits(4, "RowExclusiveLock", 12),
    ]
    by_pid = {wait.pid: wait for wait in lock_waits(rows)}
    assert (by_pid[2].hard, by_pid[2].soft, by_pid[2].position) == ((1,), (), 0)
    assert (by_pid[3].hard, by_pid[3].soft) == ((), (2,))
    assert (by_pid[4].hard, by_pid[4].soft) == ((), (2,))
    assert by_pid[4].blockers == (2,)
    assert by_pid[2].strong and not by_pid[3].strong
    assert roots_of(by_pid.values()) == {2: 1, 3: 1, 4: 1}


def test_several_holders_are_all_hard_blockers_and_compatible_ones_are_not() -> None:
    rows = [
        held(1, "AccessShareLock"),
        held(2, "RowExclusiveLock"),
        held(3, "SIReadLock"),
        waits(4, "ShareLock", 1),  # CREATE INDEX: blocked by the writer only
        waits(5, "AccessExclusiveLock", 2),
    ]
    by_pid = {wait.pid: wait for wait in lock_waits(rows)}
    assert by_pid[4].hard == (2,)
    assert (by_pid[5].hard, by_pid[5].soft) == ((1, 2), (4,))


def test_a_session_upgrading_its_own_lock_is_not_its_own_blocker() -> None:
    rows = [
        held(1, "AccessShareLock"),
        held(2, "AccessShareLock"),
        waits(1, "AccessExclusiveLock", 0),
    ]
    (wait,) = lock_waits(rows)
    assert wait.hard == (2,)


def test_a_row_convoy_roots_at_the_transaction_holding_the_row() -> None:
    xid = "transactionid::::::900:::"
    row = "tuple:5:16384:0:1:::::"
    rows = [
        held(1, "ExclusiveLock", xid),  # the hung worker's transaction
        held(2, "ExclusiveLock", row),  # the first waiter holds the tuple's place
        LockRowFact(2, "transactionid", xid, "ShareLock", False, T0),
        waits(3, "ExclusiveLock", 1, row),
        waits(4, "ExclusiveLock", 2, row),
    ]
    found = lock_waits(rows)
    by_pid = {wait.pid: wait for wait in found}
    assert by_pid[2].hard == (1,) and by_pid[2].relation == "jobs"
    assert by_pid[3].hard == (2,) and by_pid[4].soft == (3,)
    assert roots_of(found) == {2: 1, 3: 1, 4: 1}


def test_a_deadlock_cycle_ends_the_walk() -> None:
    a, b = "transactionid::::::1:::", "transactionid::::::2:::"
    rows = [
        held(1, "ExclusiveLock", a),
        held(2, "ExclusiveLock", b),
        waits(1, "ShareLock", 0, b),
        waits(2, "ShareLock", 1, a),
    ]
    roots = roots_of(lock_waits(rows))
    assert set(roots) == {1, 2} and set(roots.values()) <= {1, 2}


_modes = st.sampled_from([*MODES, "SIReadLock"])
_rows = st.lists(
    st.tuples(
        st.integers(1, 12),
        st.sampled_from(["relation:1:1", "relation:1:2", "transactionid:7"]),
        _modes,
        st.booleans(),
        st.integers(0, 50),
    ),
    max_size=30,
)


@given(_rows)
def test_blockers_are_exactly_conflicting_holders_and_conflicting_earlier_waiters(
    raw: list[tuple[int, str, str, bool, int]],
) -> None:
    rows = [
        LockRowFact(pid, tag.partition(":")[0], tag, mode, granted, T0 + timedelta(seconds=at))
        for pid, tag, mode, granted, at in raw
    ]
    found = lock_waits(rows)
    assert len(found) == sum(not row.granted for row in rows)
    for wait in found:
        same = [row for row in rows if row.tag == wait.tag]
        holders = {
            r.pid for r in same if r.granted and r.pid != wait.pid and conflicts(r.mode, wait.mode)
        }
        assert set(wait.hard) == holders
        queue = sorted((r for r in same if not r.granted), key=lambda r: (r.wait_start, r.pid))
        ahead = queue[: wait.position]
        expected_soft = {r.pid for r in ahead if r.pid != wait.pid and conflicts(r.mode, wait.mode)}
        assert set(wait.soft) == expected_soft - holders
        assert wait.pid not in wait.blockers
        if wait.position == 0:
            assert not wait.soft
    roots = roots_of(found)
    waiting = {wait.pid for wait in found}
    assert set(roots) == waiting
    # A root waits on nothing, or sits on a cycle among the waiters.
    for root in roots.values():
        assert root not in waiting or root in roots


def flatten(node: LockTreeNode) -> list[int]:
    return [node.pid, *(pid for child in node.waiters for pid in flatten(child))]


def test_the_lock_tree_puts_the_root_first_and_the_queue_under_the_alter() -> None:
    rows = [
        held(1, "AccessShareLock"),
        waits(2, "AccessExclusiveLock", 10),
        waits(3, "AccessShareLock", 11),
        waits(4, "RowExclusiveLock", 12),
    ]
    (tree,) = lock_forest(lock_waits(rows))
    assert (tree.pid, tree.wait, tree.size) == (1, None, 4)
    (alter,) = tree.waiters
    assert alter.pid == 2 and alter.wait is not None and alter.wait.mode == "AccessExclusiveLock"
    assert [child.pid for child in alter.waiters] == [3, 4]


def test_a_waiter_of_two_roots_is_in_both_trees_naming_both_blockers() -> None:
    rows = [
        held(1, "AccessShareLock"),
        held(2, "RowExclusiveLock"),
        waits(3, "AccessExclusiveLock", 0),
    ]
    trees = lock_forest(lock_waits(rows))
    assert [tree.pid for tree in trees] == [1, 2]
    for tree in trees:
        (waiter,) = tree.waiters
        assert waiter.wait is not None and waiter.wait.blockers == (1, 2)


def test_a_long_queue_makes_a_wide_tree_not_a_deep_one() -> None:
    rows = [held(1, "AccessShareLock")]
    rows += [waits(pid, "AccessExclusiveLock", pid) for pid in range(2, 2002)]
    (tree,) = lock_forest(lock_waits(rows))
    assert tree.size == 2001 and len(tree.waiters) == 2000


@given(_rows)
def test_every_waiter_is_in_the_forest_once_per_root_it_reaches(
    raw: list[tuple[int, str, str, bool, int]],
) -> None:
    rows = [
        LockRowFact(pid, tag.partition(":")[0], tag, mode, granted, T0 + timedelta(seconds=at))
        for pid, tag, mode, granted, at in raw
    ]
    found = lock_waits(rows)
    forest = lock_forest(found)
    blocked = {wait.pid for wait in found if wait.blockers}
    in_trees = {pid for tree in forest for pid in flatten(tree)[1:]}
    assert blocked <= in_trees | {tree.pid for tree in forest}
    for tree in forest:
        pids = flatten(tree)
        assert len(pids) == len(set(pids)) == tree.size
