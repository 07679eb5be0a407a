"""A target's poll pace: its interval while the lock manager is calm, slower
while the server's sessions keep waiting on it, and back once it calms down;
and the runner plans its polls, and counts the slots left out, by it."""

from __future__ import annotations

from lockwatch.runner import TargetRunner
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board
from lockwatch.state.pace import BACKOFF_CAP, CALM, JITTER, SLOWEST, UNREACHABLE, WINDOW, PollPace
from lockwatch.state.statefile import StateStore


def test_a_calm_lock_manager_keeps_the_interval() -> None:
    pace = PollPace(interval=1.0)
    said = [pace.observe(0) for _ in range(50)] + [pace.observe(None) for _ in range(5)]
    assert said == [None] * 55 and pace.current == 1.0


def test_one_wait_now_and_then_does_not_slow_it_down() -> None:
    pace = PollPace(interval=1.0)
    for poll in range(40):
        assert pace.observe(3 if poll % WINDOW == 0 else 0) is None
    assert pace.current == 1.0


def test_waits_at_two_of_five_polls_halve_the_pace_down_to_a_quarter() -> None:
    pace = PollPace(interval=2.0)
    assert [pace.observe(w) for w in (0, 4, 0)] == [None, None, None]
    said = pace.observe(1)
    assert said is not None and "LWLock:LockManager" in said and "every 4s instead of 2s" in said
    assert pace.current == 4.0
    for _ in range(10):
        pace.observe(2)
    assert pace.factor == SLOWEST and pace.current == 8.0


def test_the_pace_comes_back_after_calm_polls_in_a_row() -> None:
    pace = PollPace(interval=1.0, factor=SLOWEST)
    said = [pace.observe(0) for _ in range(CALM)]
    assert said[:-1] == [None] * (CALM - 1) and "calm again: polling every 2s" in str(said[-1])
    pace.observe(5)  # one wait starts the calm count again
    assert [pace.observe(0) for _ in range(CALM - 1)] == [None] * (CALM - 1)
    assert pace.observe(0) is not None and pace.current == 1.0


def runner(interval: float, now: float) -> TargetRunner:
    runner = TargetRunner(
        Target("t", "postgresql://x@127.0.0.1/db", interval=interval), Board(), StateStore(None)
    )
    runner.seat.clock = lambda: now
    return runner


def test_the_runner_plans_by_the_pace_and_counts_the_slots_it_leaves_out() -> None:
    slowed = runner(interval=1.0, now=100.2)
    slowed.pace.factor = 4
    assert slowed._next_due(100.0) == 104.0
    assert slowed._next_due(104.0) == 108.0
    assert slowed.pace.skipped == {"contended": 6}

    late = runner(interval=1.0, now=103.5)  # a poll due at 100.0 ended at 103.5
    assert late._next_due(100.0) == 104.0
    assert late.pace.skipped == {"overran": 3}


def test_the_spacing_planned_is_noted_only_while_the_target_answers() -> None:
    assert runner(interval=1.0, now=100.2).pace.spacing is None  # nothing planned yet
    slowed = runner(interval=1.0, now=100.2)
    slowed.pace.factor = 4
    slowed._next_due(100.0)
    assert slowed.pace.spacing == 4.0
    late = runner(interval=1.0, now=103.5)
    late._next_due(100.0)
    assert late.pace.spacing == 4.0  # the slots the overrun skipped included
    gone = runner(interval=1.0, now=100.2)
    gone.pace.reached(False)
    gone._next_due(100.0)
    assert gone.pace.spacing is None  # backing off: a gap lockwatch did not choose
    reloaded = runner(interval=1.0, now=104.1)  # the config changed: it takes over
    reloaded.take_over(slowed)
    assert reloaded.pace.spacing == 4.0


def test_an_unreachable_target_is_looked_at_less_often_up_to_the_cap_with_jitter() -> None:
    pace = PollPace(interval=1.0, jitter=lambda: 0.0)
    waits = []
    for _ in range(8):
        pace.reached(False)
        waits.append(pace.planned())
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    assert pace.skipped == {UNREACHABLE: sum(int(w) - 1 for w in waits)}
    pace.reached(True)  # the first answer brings the pace back at once
    assert pace.planned() == 1.0

    jittered = PollPace(interval=1.0, jitter=lambda: 0.999)
    for _ in range(6):
        jittered.reached(False)
    assert BACKOFF_CAP * (1 - JITTER) < jittered.current < BACKOFF_CAP


def test_a_slow_target_s_interval_is_never_shortened_by_the_backoff() -> None:
    pace = PollPace(interval=60.0, jitter=lambda: 0.999)
    pace.reached(False)
    assert pace.current == 60.0


def test_overruns_are_said_once_per_run() -> None:
    pace = PollPace(interval=1.0)
    assert [pace.overran(n) for n in (2, 3, 0, 1, 1)] == [True, False, False, True, False]
    assert pace.skipped == {"overran": 7}
