"""Waiter-seconds: the time sessions spent blocked, counted poll after poll,
bounded by relation, and only ever growing per series."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.lock_waits import LockWait
from lockwatch.state.waiter_seconds import OTHER, RELATIONS_NAMED, WaiterSeconds
from tests.fixtures.snapshots import NOW, ago, backend


def wait(
    pid: int, waited: float | None, relation: str | None = "jobs", locktype: str = "relation"
) -> LockWait:
    start = None if waited is None else ago(waited)
    return LockWait(pid, locktype, "AccessShareLock", f"{locktype}:1", relation, start, (1,), (), 0)


BACKENDS = {pid: backend(pid) for pid in range(1, 100)}


def test_a_dated_wait_counts_from_its_start_then_from_each_poll() -> None:
    counted = WaiterSeconds()
    counted.observe([wait(2, 10.0), wait(3, 4.0)], BACKENDS, NOW)
    assert counted.published() == {("app", "relation", "jobs"): 14.0}
    later = NOW + timedelta(seconds=5)
    counted.observe([wait(2, 15.0)], BACKENDS, later)  # the same wait, 5 s on; pid 3 got its lock
    assert counted.published() == {("app", "relation", "jobs"): 19.0}


def test_an_undated_wait_counts_from_the_first_poll_that_saw_it() -> None:
    counted = WaiterSeconds()
    counted.observe([wait(2, None, None, "transactionid")], BACKENDS, NOW)
    assert counted.published() == {}
    counted.observe([wait(2, None, None, "transactionid")], BACKENDS, NOW + timedelta(seconds=2))
    assert counted.published() == {("app", "transactionid", ""): 2.0}


def test_relations_past_the_bound_are_counted_as_other_and_a_named_one_keeps_its_series() -> None:
    counted = WaiterSeconds()
    many = [wait(pid, 1.0, f"t{pid}") for pid in range(2, RELATIONS_NAMED + 7)]
    counted.observe(many, BACKENDS, NOW)
    relations = {relation for _, _, relation in counted.published()}
    assert len(relations) == RELATIONS_NAMED + 1 and OTHER in relations
    assert counted.published()[("app", "relation", OTHER)] == 5.0
    counted.observe([wait(2, 2.0, "t2")], BACKENDS, NOW + timedelta(seconds=1))
    assert counted.published()[("app", "relation", "t2")] == 2.0


@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(2, 30), st.floats(0, 100), st.sampled_from(["a", "b", None])),
            max_size=10,
        ),
        max_size=8,
    )
)
def test_every_series_only_grows(polls: list[list[tuple[int, float, str | None]]]) -> None:
    counted = WaiterSeconds()
    before: dict[tuple[str, str, str], float] = {}
    for step, seen in enumerate(polls):
        now = NOW + timedelta(seconds=step)
        counted.observe(
            [wait(pid, waited, relation) for pid, waited, relation in seen], BACKENDS, now
        )
        after = counted.published()
        assert all(after.get(key, 0.0) >= value for key, value in before.items())
        before = after
