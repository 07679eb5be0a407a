"""The poll scheduler: its plan on a clock the tests set, and its pollers."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from hypothesis import assume, given
from hypothesis import strategies as st

from lockwatch.scheduler import Plan, PollScheduler, Seat
from tests.fixtures.postgres import wait_until


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_plan_hands_out_what_is_due_earliest_first() -> None:
    plan: Plan[str] = Plan()
    plan.put("late", 30.0)
    plan.put("early", 10.0)
    plan.put("middle", 20.0)

    assert plan.next_due() == 10.0
    assert plan.pop_due(20.0) == [("early", 10.0), ("middle", 20.0)]
    assert plan.next_due() == 30.0
    assert plan.pop_due(29.9) == []
    assert "late" in plan and "early" not in plan


def test_planning_a_job_again_replaces_its_due_time() -> None:
    plan: Plan[str] = Plan()
    plan.put("stopping", 100.0)
    plan.put("stopping", 5.0)
    plan.put("other", 50.0)

    assert plan.pop_due(100.0) == [("stopping", 5.0), ("other", 50.0)]
    assert plan.next_due() is None


def test_jobs_due_at_the_same_time_go_in_the_order_they_were_planned() -> None:
    plan: Plan[int] = Plan()
    for job in range(5):
        plan.put(job, 7.0)

    assert [job for job, _ in plan.pop_due(7.0)] == [0, 1, 2, 3, 4]


@given(
    intervals=st.lists(st.sampled_from([1.0, 2.0, 5.0, 10.0]), min_size=1, max_size=40),
    cost=st.floats(min_value=0.0, max_value=0.05),
)
def test_one_busy_poller_starves_no_job(intervals: list[float], cost: float) -> None:
    """A single poller that takes ``cost`` per poll and keeps up on average:
    every job is polled, in due order, and none waits longer than one poll of
    every job."""
    assume(sum(cost / interval for interval in intervals) <= 1.0)
    plan: Plan[int] = Plan()
    now = 0.0
    for job, interval in enumerate(intervals):
        plan.put(job, now + interval * job / len(intervals))
    polls = dict.fromkeys(range(len(intervals)), 0)
    started: list[float] = []
    while now < 30.0:
        first = plan.next_due()
        assert first is not None
        now = max(now, first)
        for job, due in plan.pop_due(now):  # what the dispatcher hands the poller
            started.append(due)
            assert now - due <= len(intervals) * cost + 1e-9, "a job waited past one round"
            polls[job] += 1
            now += cost
            plan.put(job, due + intervals[job])
    assert started == sorted(started), "a job due later went before one due earlier"
    for job, interval in enumerate(intervals):
        assert polls[job] >= int(30.0 // interval) - 1, f"job {job} was passed over"


@dataclass
class Recorder:
    """A job that notes each run and plans its next ``interval`` later, a
    given number of times."""

    clock: Clock
    runs: int = 1
    interval: float = 0.0
    ran: list[float] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    release: threading.Event | None = None  # a poll that hangs until set

    def run_due(self, due: float) -> float | None:
        self.ran.append(due)
        if self.release is not None:
            self.release.wait(20)
        if len(self.ran) >= self.runs:
            self.done.set()
            return None
        return due + self.interval


def test_jobs_run_until_they_say_they_are_done() -> None:
    clock = Clock()
    scheduler = PollScheduler(clock=clock)
    job = Recorder(clock, runs=3, interval=0.0)
    scheduler.add(job, clock.now)
    try:
        assert job.done.wait(20)
        assert job.ran == [clock.now] * 3
    finally:
        scheduler.close()


def test_a_hurried_job_runs_now_instead_of_at_its_due_time() -> None:
    clock = Clock()
    scheduler = PollScheduler(clock=clock)
    job = Recorder(clock)
    scheduler.add(job, clock.now + 1e6)
    try:
        scheduler.hurry(job)
        assert job.done.wait(20)
        assert job.ran == [clock.now]
    finally:
        scheduler.close()


def test_a_job_hurried_during_its_poll_runs_again_when_the_poll_ends() -> None:
    clock = Clock()
    scheduler = PollScheduler(clock=clock)
    job = Recorder(clock, runs=2, interval=1e6, release=threading.Event())
    scheduler.add(job, clock.now)
    try:
        wait_until(lambda: job.ran, message="the first poll started")
        scheduler.hurry(job)
        assert job.release is not None
        job.release.set()
        assert job.done.wait(20), "the second run waited for its due time a million s away"
        assert job.ran == [clock.now, clock.now]
    finally:
        scheduler.close()


def test_the_pool_grows_for_hung_polls_but_no_further_than_its_bound() -> None:
    clock = Clock()
    scheduler = PollScheduler(clock=clock, max_pollers=3)
    release = threading.Event()
    jobs = [Recorder(clock, release=release) for _ in range(5)]
    for job in jobs:
        scheduler.add(job, clock.now)
    try:
        wait_until(lambda: sum(len(job.ran) for job in jobs) == 3, message="three polls hang")
        assert scheduler.pollers == 3
        assert sum(len(job.ran) for job in jobs) == 3, "a fourth poll ran beyond the bound"
        release.set()
        for job in jobs:
            assert job.done.wait(20), "a job queued behind the hung polls never ran"
        assert scheduler.pollers == 3
    finally:
        scheduler.close()


def test_each_poll_start_is_counted_with_its_lateness() -> None:
    clock = Clock()
    scheduler = PollScheduler(clock=clock)
    late, on_time = Recorder(clock), Recorder(clock)
    scheduler.add(late, clock.now - 0.3)
    scheduler.add(on_time, clock.now)
    try:
        assert late.done.wait(20) and on_time.done.wait(20)
        counts = scheduler.lateness.counts()
        assert counts.count == 2
        assert dict(counts.cumulative)[0.001] == 1
        assert dict(counts.cumulative)[0.25] == 1
        assert dict(counts.cumulative)[0.5] == 2
        assert abs(counts.total_seconds - 0.3) < 1e-9
    finally:
        scheduler.close()


def test_a_seat_runs_its_job_on_the_schedulers_clock_and_waits_for_its_end() -> None:
    clock = Clock()
    scheduler = PollScheduler(clock=clock)
    job = Recorder(clock)
    never = Seat(job, "never")
    assert never.finished and not never.started  # nothing to wait for before it starts
    seat = Seat(job, "shared")
    try:
        seat.start(scheduler, delay=1e6)
        assert (seat.clock, seat.started, seat.finished) == (clock, True, False)
        seat.hurry()  # due a million seconds away: run now
        assert job.done.wait(20) and job.ran == [clock.now]
        seat.ended()
        seat.wait(0)
        assert seat.finished
        # The daemon's scheduler goes on for the other seats on it.
        other = Recorder(clock)
        scheduler.add(other, clock.now)
        assert other.done.wait(20)
    finally:
        scheduler.close()


def test_a_seat_of_its_own_closes_its_scheduler_when_the_job_ends() -> None:
    job = Recorder(Clock())
    seat = Seat(job, "alone")
    seat.start(None, delay=0.0)
    assert job.done.wait(20)
    assert [t.name for t in threading.enumerate() if t.name.startswith("poll-alone")]
    seat.ended()
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("poll-alone")],
        message="its scheduler's threads ended",
    )
    assert seat.finished
