"""queue_job_too_long: a library's running job past its task's learned budget
or the queue's max_job_duration; silent while a task is still learned."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.detect.long_jobs import LEARNING, detect_long_jobs, job_budget, longest_running
from lockwatch.model.evidence import LongJobsEvidence
from lockwatch.model.findings import FindingKind, Severity, Subject
from lockwatch.model.queues import QueueJobRun, QueueSample, RunningJobs, StuckJobs, TaskHistory
from lockwatch.sample.queues import reading_from_row
from lockwatch.settings.queues import QueueThresholds
from tests.fixtures.evidence import evidence_as

NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
HISTORY = {"reports": TaskHistory(30, 1.0, 2.0)}


def run(job: str, seconds_ago: float, task: str = "reports") -> QueueJobRun:
    return QueueJobRun(
        job,
        0,
        NOW - timedelta(seconds=seconds_ago),
        ("instance 1a2b3c4d (pid 41 on app-1)",),
        False,
        task=task,
        sessions=(2041,),
        library_deadline=NOW - timedelta(seconds=seconds_ago) + timedelta(minutes=15),
        library_action="pg-boss expires it (expire_seconds 900) and retries or fails it",
    )


def sample(*runs: QueueJobRun, history: dict[str, TaskHistory] | None = None) -> QueueSample:
    return QueueSample(
        NOW, 0, running=RunningJobs(runs, frozenset()), task_history=history or HISTORY
    )


def test_a_job_past_its_tasks_learned_budget_is_named_with_its_worker_and_deadline() -> None:
    finding = detect_long_jobs(
        "main", "reports", QueueThresholds(), sample(run("7", 61), run("8", 5)), NOW
    )
    assert finding is not None
    assert finding.kind is FindingKind.QUEUE_JOB_TOO_LONG
    assert finding.subject == Subject(queue="reports")
    assert finding.severity is Severity.WARNING
    assert finding.since == NOW - timedelta(seconds=61)
    evidence = evidence_as(finding, LongJobsEvidence)
    assert evidence.count == 1 and evidence.jobs[0].job_id == "7"
    assert evidence.jobs[0].budget_seconds == 60.0  # 3 x 2s is below the 60 s floor
    assert finding.summary == (
        "queue reports: job 7 (reports) running for 1m1s, past its task's learned 1m "
        "(usually 1s, p99 2s over 30 runs); worker instance 1a2b3c4d (pid 41 on app-1), "
        "session pid 2041; pg-boss expires it (expire_seconds 900) and retries or fails it "
        "in 13m59s"
    )


def test_a_job_whose_workers_liveness_is_not_told_says_so() -> None:
    # graphile-worker: no job's worker can be judged alive, so a job its dead
    # worker left is told only by its duration.
    unknown = replace(run("7", 61), liveness_told=False)
    finding = detect_long_jobs("main", "reports", QueueThresholds(), sample(unknown), NOW)
    assert finding is not None
    assert not evidence_as(finding, LongJobsEvidence).jobs[0].liveness_told
    assert finding.summary.endswith(
        "; whether its worker still lives cannot be told (its library ties no running job"
        " to a live worker): a job its dead worker left is told only here"
    )


def test_no_budget_while_the_task_is_learned_or_unknown() -> None:
    few = {"reports": TaskHistory(LEARNING.min_runs - 1, 1.0, 2.0)}
    long_ago = run("7", 3600)
    assert (
        detect_long_jobs("main", "q", QueueThresholds(), sample(long_ago, history=few), NOW) is None
    )
    other = run("7", 3600, task="other")
    assert detect_long_jobs("main", "q", QueueThresholds(), sample(other), NOW) is None


def test_a_configured_budget_needs_no_history() -> None:
    thresholds = QueueThresholds(max_job_duration=600.0)
    assert job_budget(thresholds, None) == (600.0, "max_job_duration")
    assert detect_long_jobs("main", "q", thresholds, sample(run("7", 599)), NOW) is None
    finding = detect_long_jobs("main", "q", thresholds, sample(run("7", 601)), NOW)
    assert finding is not None and "past its max_job_duration 10m" in finding.summary


def test_a_preset_reads_tasks_sessions_deadlines_and_history() -> None:
    row = {
        "depth": 0,
        "running_jobs": [
            {
                "id": 7,
                "attempt": 0,
                "started_at": "2026-03-14T11:59:00+00:00",
                "workers": ["w"],
                "task": "reports",
                "sessions": [2041],
                "deadline": "2026-03-14T12:14:00+00:00",
                "action": "expires it",
            }
        ],
        "task_history": {"reports": {"runs": 30, "p50": 1, "p99": 2.5}},
    }
    reading = reading_from_row("reports", row, NOW)
    assert reading.task_history == {"reports": TaskHistory(30, 1.0, 2.5)}
    assert reading.running is not None
    (job,) = reading.running.runs
    assert (job.task, job.sessions, job.library_action) == ("reports", (2041,), "expires it")
    assert job.library_deadline == NOW + timedelta(minutes=14)
    assert longest_running(reading, NOW) == 60.0


@given(st.floats(0.01, 1e5), st.integers(0, 100), st.floats(0, 1e6))
def test_the_learned_budget_is_never_below_the_floor_nor_3_p99(
    p99: float, runs: int, running: float
) -> None:
    thresholds = QueueThresholds(job_duration_floor=30.0)
    budget = job_budget(thresholds, TaskHistory(runs, p99 / 2, p99))
    if runs < LEARNING.min_runs:
        assert budget is None
        return
    assert budget is not None
    assert budget[0] == max(30.0, LEARNING.factor * p99)
    found = detect_long_jobs(
        "main",
        "reports",
        thresholds,
        sample(run("7", running), history={"reports": TaskHistory(runs, p99 / 2, p99)}),
        NOW,
    )
    assert (found is not None) == (running > budget[0])


def test_a_job_whose_worker_is_gone_is_left_to_job_stuck_running() -> None:
    reading = replace(sample(run("7", 3600)), stuck=StuckJobs(1, ("7",), NOW))
    assert detect_long_jobs("main", "reports", QueueThresholds(), reading, NOW) is None
