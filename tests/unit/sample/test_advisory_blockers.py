"""Who blocks an advisory waiter, from the locks alone: the holders of its key
whose mode conflicts, one pass over the locks whatever the queue's length."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.sample.locks import advisory_blockers
from tests.fixtures.snapshots import backend, held, waiting


def test_each_waiter_is_blocked_by_the_holder_of_its_key_only() -> None:
    locks = [held(42, 1), held(7, 2), *(waiting(42, pid) for pid in range(10, 20))]
    sessions = {pid: backend(pid) for pid in (1, 2, *range(10, 20))}
    filled = advisory_blockers(locks, sessions)
    assert {pid: filled[pid].blocked_by for pid in range(10, 20)} == dict.fromkeys(
        range(10, 20), (1,)
    )
    assert filled[1].blocked_by == () and filled[2].blocked_by == ()


def test_a_shared_waiter_is_blocked_by_the_exclusive_holder_not_the_shared_ones() -> None:
    locks = [
        held(42, 1, mode="ShareLock"),
        held(42, 2),
        waiting(42, 3, mode="ShareLock"),
    ]
    filled = advisory_blockers(locks, {pid: backend(pid) for pid in (1, 2, 3)})
    assert filled[3].blocked_by == (2,)


def test_what_the_server_said_of_a_waiter_is_kept() -> None:
    session = replace(backend(3), blocked_by=(99,))
    filled = advisory_blockers([held(42, 1), waiting(42, 3)], {1: backend(1), 3: session})
    assert filled[3].blocked_by == (99,)


@given(st.integers(0, 300), st.sampled_from(["ExclusiveLock", "ShareLock"]))
def test_every_waiter_of_a_convoy_names_the_one_holder(count: int, mode: str) -> None:
    locks = [held(42, 1), *(waiting(42, pid, mode=mode) for pid in range(2, count + 2))]
    sessions = {pid: backend(pid) for pid in range(1, count + 2)}
    filled = advisory_blockers(locks, sessions)
    assert all(filled[pid].blocked_by == (1,) for pid in range(2, count + 2))
    assert sum(len(b.blocked_by) for b in filled.values()) == count
