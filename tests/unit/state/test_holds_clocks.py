"""Hold times through jumps of the wall clock: with the monotonic clock given,
a hold is as long as it really was, whatever the wall clock did meanwhile."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.locks import AdvisoryLock, Backend
from lockwatch.sample.locks import MovedBackends, RawSample
from lockwatch.state.holds import HoldTracker
from tests.fixtures.snapshots import NOW, backend, held, waiting

PID = 1234
ACTIVE = {PID: backend(PID, state="active")}


def lock() -> AdvisoryLock:
    row = held(42, PID, held_for=None)
    return AdvisoryLock(row.database, row.key, row.mode, row.granted, row.pid)


def hold(tracker: HoldTracker, wall: datetime, monotonic: float) -> float:
    (seen,) = tracker.observe((lock(),), ACTIVE, wall, monotonic=monotonic)
    assert seen.first_seen is not None
    return (wall - seen.first_seen).total_seconds()


def test_a_jump_forward_and_back_neither_lengthens_nor_hides_a_hold() -> None:
    tracker = HoldTracker(continuity_gap=30)
    assert hold(tracker, NOW, 100.0) == 0
    assert hold(tracker, NOW + timedelta(hours=2, seconds=1), 101.0) == 1
    assert hold(tracker, NOW + timedelta(seconds=2), 102.0) == 2
    assert hold(tracker, NOW + timedelta(seconds=3), 103.0) == 3


def test_without_a_monotonic_clock_the_wall_clock_is_trusted() -> None:
    tracker = HoldTracker(continuity_gap=30)
    (first,) = tracker.observe((lock(),), ACTIVE, NOW)
    (later,) = tracker.observe((lock(),), ACTIVE, NOW + timedelta(seconds=10))
    assert later.first_seen == first.first_seen == NOW


@given(st.lists(st.tuples(st.floats(0.1, 5.0), st.integers(-7200, 7200)), max_size=20))
def test_a_hold_is_as_long_as_the_monotonic_clock_says_whatever_the_wall_did(
    steps: list[tuple[float, int]],
) -> None:
    tracker = HoldTracker(continuity_gap=30)
    monotonic = 0.0
    hold(tracker, NOW, monotonic)
    for elapsed, skew in steps:
        monotonic += elapsed
        wall = NOW + timedelta(seconds=monotonic + skew)
        assert abs(hold(tracker, wall, monotonic) - monotonic) < 1.01  # JUMP_SLACK


def test_a_sample_moved_onto_lockwatchs_clock_keeps_its_sessions_names() -> None:
    session = backend(PID, idle_for=30)
    waiter = waiting(42, 99, waited_for=10)
    raw = RawSample(180000, (lock(), waiter), {PID: session}, 0.01, NOW)
    moved = raw.moved(timedelta(hours=1))
    assert moved.read_at == NOW + timedelta(hours=1)
    (moved_session,) = moved.backends.values()
    assert moved_session.backend_start == session.backend_start
    assert session.state_change is not None
    assert moved_session.state_change == session.state_change + timedelta(hours=1)
    assert moved.locks[0] is raw.locks[0]  # no server timestamp: the same object
    assert waiter.wait_start is not None
    assert moved.locks[1].wait_start == waiter.wait_start + timedelta(hours=1)
    assert raw.moved(timedelta(0)) is raw


SESSIONS = st.dictionaries(
    st.integers(1, 6),
    st.builds(lambda pid, idle: backend(pid, idle_for=idle), st.integers(1, 6), st.integers(0, 99)),
    max_size=4,
)


@given(st.lists(st.tuples(SESSIONS, st.sampled_from((-3600, -1, 1, 7200))), max_size=8))
def test_sessions_moved_poll_after_poll_are_what_moving_each_afresh_gives(
    polls: list[tuple[dict[int, Backend], int]],
) -> None:
    known = MovedBackends()
    for sessions, skew in polls:
        raw = RawSample(180000, (), sessions, 0.01, NOW)
        assert raw.moved(timedelta(seconds=skew), known) == raw.moved(timedelta(seconds=skew))


def test_a_session_read_unchanged_at_the_same_offset_is_last_polls_moved_value() -> None:
    known, session = MovedBackends(), backend(PID, idle_for=30)
    first = RawSample(180000, (), {PID: session}, 0.01, NOW).moved(timedelta(hours=1), known)
    again = RawSample(180000, (), {PID: session}, 0.01, NOW).moved(timedelta(hours=1), known)
    assert again.backends[PID] is first.backends[PID]
    other = RawSample(180000, (), {PID: session}, 0.01, NOW).moved(timedelta(hours=2), known)
    assert other.backends[PID] is not first.backends[PID]
    assert session.state_change is not None
    assert other.backends[PID].state_change == session.state_change + timedelta(hours=2)
