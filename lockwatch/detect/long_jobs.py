"""``queue_job_too_long``: a queue library's job running far longer than its
own task's history, or than the queue's ``max_job_duration``.

A hung handler (an HTTP call without a timeout, a deadlock in the process)
keeps its job running while its worker lives, so no stuck-job rule sees it,
and the library acts late or never (pg-boss expires it after its
``expire_seconds``, 15 minutes by default, and starts it again while the
first handler goes on; graphile-worker frees its lock after 4 hours). With
``max_job_duration: auto`` the budget is learned per task as ``max_duration:
auto`` is for pinged jobs: once the task has :data:`LEARNING`'s ``min_runs``
successful runs in its library's recent rows, ``factor`` x their p99, never
below ``job_duration_floor``; until then, no budget.

Pure: the latest reading's running jobs and task history come in.
"""

from __future__ import annotations

from datetime import datetime

from lockwatch.model.evidence import LongJobFacts, LongJobsEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.queues import QueueJobRun, QueueSample, TaskHistory
from lockwatch.settings.fields import Learned
from lockwatch.settings.jobs import RunLearning
from lockwatch.settings.queues import QueueThresholds
from lockwatch.text import format_duration, format_short_duration, one_line

LEARNING = RunLearning()  # min_runs and factor, as pinged jobs learn theirs
SHOWN_JOBS = 20  # long jobs in the evidence
ACTION_LIMIT = 120  # characters of what the library will do, in the summary


def job_budget(
    thresholds: QueueThresholds, history: TaskHistory | None
) -> tuple[float, str] | None:
    """A job's budget and where it comes from; None while its task is learned.

    >>> job_budget(QueueThresholds(), TaskHistory(30, 1.0, 2.5))
    (60.0, 'usually 1s, p99 2.5s over 30 runs')
    >>> job_budget(QueueThresholds(max_job_duration=600.0), None)
    (600.0, 'max_job_duration')
    """
    if not isinstance(thresholds.max_job_duration, Learned):
        return thresholds.max_job_duration, "max_job_duration"
    if history is None or history.runs < LEARNING.min_runs:
        return None
    normal = (
        f"usually {format_short_duration(history.p50_seconds)}, "
        f"p99 {format_short_duration(history.p99_seconds)} over {history.runs} runs"
    )
    return max(LEARNING.factor * history.p99_seconds, thresholds.job_duration_floor), normal


def _long(
    run: QueueJobRun, sample: QueueSample, thresholds: QueueThresholds, now: datetime
) -> LongJobFacts | None:
    history = (sample.task_history or {}).get(run.task) if run.task is not None else None
    budget = job_budget(thresholds, history)
    running = (now - run.started_at).total_seconds()
    if budget is None or running <= budget[0]:
        return None
    return LongJobFacts(
        job_id=run.job_id,
        task=run.task,
        attempt=run.attempt,
        started_at=run.started_at,
        running_seconds=round(running, 3),
        budget_seconds=budget[0],
        budget_from=budget[1],
        workers=run.workers,
        sessions=run.sessions,
        library_deadline=run.library_deadline,
        library_action=run.library_action,
        liveness_told=run.liveness_told,
    )


def _summary(queue: str, evidence: LongJobsEvidence, now: datetime) -> str:
    job = evidence.jobs[0]
    task = f" ({one_line(job.task)})" if job.task else ""
    more = f" and {evidence.count - 1} more" if evidence.count > 1 else ""
    budget = (
        f"its max_job_duration {format_duration(job.budget_seconds)}"
        if job.budget_from == "max_job_duration"
        else f"its task's learned {format_duration(job.budget_seconds)} ({job.budget_from})"
    )
    text = (
        f"queue {one_line(queue)}: job {one_line(job.job_id)}{task}{more} running for "
        f"{format_duration(job.running_seconds)}, past {budget}"
    )
    if job.workers:
        text += f"; worker {', '.join(one_line(w) for w in job.workers)}"
    if job.sessions:
        text += f", session pid {', '.join(str(pid) for pid in job.sessions)}"
    if job.library_deadline is not None and job.library_action:
        left = (job.library_deadline - now).total_seconds()
        when = f"in {format_duration(left)}" if left > 0 else "now"
        text += f"; {one_line(job.library_action, ACTION_LIMIT)} {when}"
    elif job.library_action:
        text += f"; {one_line(job.library_action, ACTION_LIMIT)}"
    if not job.liveness_told:
        text += (
            "; whether its worker still lives cannot be told (its library ties no running"
            " job to a live worker): a job its dead worker left is told only here"
        )
    return text


def longest_running(sample: QueueSample | None, now: datetime) -> float | None:
    """Seconds the longest-running job of the reading has run; None when not told."""
    if sample is None or sample.running is None:
        return None
    starts = [run.started_at for run in sample.running.runs]
    return max(0.0, (now - min(starts)).total_seconds()) if starts else 0.0


def detect_long_jobs(
    target: str, queue: str, thresholds: QueueThresholds, sample: QueueSample, now: datetime
) -> Finding | None:
    """The queue's finding while any of its running jobs is past its budget."""
    if sample.running is None:
        return None
    # A job whose worker is gone is job_stuck_running's, not a hung handler.
    stuck = set(sample.stuck.job_ids) if sample.stuck is not None else set()
    long = [
        facts
        for run in sample.running.runs
        if run.job_id not in stuck and (facts := _long(run, sample, thresholds, now))
    ]
    if not long:
        return None
    long.sort(key=lambda job: (job.started_at, job.job_id))
    evidence = LongJobsEvidence(queue, tuple(long[:SHOWN_JOBS]), len(long))
    first = long[0]
    return Finding(
        FindingKind.QUEUE_JOB_TOO_LONG,
        target,
        Subject(queue=queue),
        Severity.WARNING,
        first.started_at,
        _summary(queue, evidence, now),
        evidence,
    )
