"""A job's run duration learned from its own history (``max_duration: auto``)
and ``failures_before_alert`` for ``job_failed``."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.jobs import detect_jobs
from lockwatch.model.findings import FindingKind
from lockwatch.model.jobs import JobRun, RunStatus
from lockwatch.settings.fields import Learned
from lockwatch.settings.jobs import JobSpec, RunLearning
from tests.unit.detect.test_jobs import NOW, WATCHING_SINCE

HOURLY = JobSpec(
    "sync",
    max_duration=Learned.AUTO,
    learning=RunLearning(min_runs=10, factor=3.0, floor=60.0),
    lookback=86400.0,
)


def finished(hours_ago: float, seconds: float, status: RunStatus = RunStatus.SUCCESS) -> JobRun:
    start = NOW - timedelta(hours=hours_ago)
    return JobRun("sync", None, start, start + timedelta(seconds=seconds), status, "app-1")


def running_for(seconds: float) -> JobRun:
    return JobRun("sync", None, NOW - timedelta(seconds=seconds), host="app-1")


def found(spec: JobSpec, runs: list[JobRun], kind: FindingKind) -> list[str]:
    return [
        f.summary
        for f in detect_jobs(spec, runs, NOW, target="main", not_before=WATCHING_SINCE)
        if f.kind is kind
    ]


def usual_runs(count: int = 20, seconds: float = 40.0) -> list[JobRun]:
    return [finished(hours + 1, seconds + hours % 3) for hours in range(count)]


def test_a_run_far_past_its_usual_duration_is_too_long() -> None:
    (summary,) = found(HOURLY, [*usual_runs(), running_for(400.0)], FindingKind.JOB_TOO_LONG)
    assert "longer than its learned 2m6s (usually 41s, p99 42s over 20 runs)" in summary


def test_a_run_within_its_usual_duration_is_quiet() -> None:
    assert found(HOURLY, [*usual_runs(), running_for(120.0)], FindingKind.JOB_TOO_LONG) == []


def test_while_learning_there_is_no_limit() -> None:
    too_few = usual_runs(count=9)
    assert found(HOURLY, [*too_few, running_for(4000.0)], FindingKind.JOB_TOO_LONG) == []


def test_failed_runs_teach_nothing() -> None:
    failed = [finished(h + 1, 5000.0, RunStatus.FAIL) for h in range(10)]
    runs = [*usual_runs(), *failed, running_for(400.0)]
    assert len(found(HOURLY, runs, FindingKind.JOB_TOO_LONG)) == 1


@given(st.lists(st.booleans(), min_size=1, max_size=12), st.integers(min_value=1, max_value=5))
def test_job_failed_needs_that_many_failed_runs_in_a_row(outcomes: list[bool], n: int) -> None:
    spec = JobSpec("sync", failures_before_alert=n)
    # outcomes[0] is the newest run: True = failed
    runs = [
        finished(hours * 0.1, 10.0, RunStatus.FAIL if failed else RunStatus.SUCCESS)
        for hours, failed in enumerate(outcomes)
    ]
    streak = next((i for i, failed in enumerate(outcomes) if not failed), len(outcomes))
    assert bool(found(spec, runs, FindingKind.JOB_FAILED)) == (streak >= n)


def test_the_summary_counts_the_failures_in_a_row() -> None:
    spec = JobSpec("sync", failures_before_alert=3)
    runs = [finished(h * 0.1, 10.0, RunStatus.FAIL) for h in range(3)]
    (summary,) = found(spec, runs, FindingKind.JOB_FAILED)
    assert summary == "the last 3 runs of job sync failed, the last on app-1"
