"""The lock trees /api/v1/locks serves: root first, every waiter's blockers
named, bounded, and what is cut counted where it was cut."""

from __future__ import annotations

from datetime import timedelta

from lockwatch.model.lock_waits import LockRowFact, lock_waits
from lockwatch.model.locks import LockSnapshot
from lockwatch.publish.api.lock_tree import TREE_SESSIONS, lock_tree_entries
from tests.fixtures.snapshots import NOW, TARGET, backend

TABLE = "relation:5:16384"


def queue(length: int) -> LockSnapshot:
    """An idle reader, an ALTER waiting on it, ``length`` readers behind the ALTER."""
    rows = [
        LockRowFact(1, "relation", TABLE, "AccessShareLock", True),
        LockRowFact(2, "relation", TABLE, "AccessExclusiveLock", False, NOW, "jobs"),
    ]
    rows += [
        LockRowFact(pid, "relation", TABLE, "AccessShareLock", False, NOW + timedelta(seconds=pid))
        for pid in range(3, 3 + length)
    ]
    backends = {pid: backend(pid, f"app-{pid}") for pid in range(1, 3 + length)}
    return LockSnapshot(TARGET, NOW, 180000, (), backends, waits=lock_waits(rows))


def test_the_root_comes_first_with_the_alter_and_its_queue_under_it() -> None:
    (tree,) = lock_tree_entries(queue(2), NOW + timedelta(seconds=10))
    assert (tree["pid"], tree["wait"], tree["waiters_left_out"]) == (1, None, 0)
    (alter,) = tree["waiters"]
    assert alter["wait"] == {
        "locktype": "relation",
        "mode": "AccessExclusiveLock",
        "relation": "jobs",
        "wait_seconds": 10.0,
        "blocked_by": [1],
    }
    assert [w["pid"] for w in alter["waiters"]] == [3, 4]
    assert all(w["wait"]["blocked_by"] == [2] for w in alter["waiters"])


def test_a_queue_past_the_bound_is_listed_to_it_and_the_rest_counted() -> None:
    (tree,) = lock_tree_entries(queue(500), NOW)
    (alter,) = tree["waiters"]
    listed = 2 + len(alter["waiters"])
    assert listed == TREE_SESSIONS
    assert alter["waiters_left_out"] == 500 - len(alter["waiters"])
    assert tree["waiters_left_out"] == 0


def test_no_wait_no_tree() -> None:
    assert lock_tree_entries(LockSnapshot(TARGET, NOW, 180000, ()), NOW) == []
