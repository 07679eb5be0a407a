"""Jobs a queue library started again while the worker of their earlier start
still lives (``job_rescued_while_running``): Oban's Lifeline and River's
rescuer move a job back by its age alone, and pg-boss gives up on a handler
after its expiry without stopping it, so a slow job runs twice at once.

Told from consecutive readings of the running jobs: a job seen running at
attempt N by workers W, then running at a later attempt that the library
says followed a rescue (not a failure its worker reported), while one of W is
seen alive during that later start. The finding lasts while it runs. Pure: the
readings and what the last poll remembered come in, findings and what to
remember go out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from lockwatch.model.evidence import QueueRunFacts, RescuedJobFacts, RescuedRunsEvidence
from lockwatch.model.findings import Finding, FindingKind, Severity, Subject
from lockwatch.model.queues import QueueJobRun, RunningJobs
from lockwatch.text import format_duration, one_line

# Runs remembered per queue after they stop showing as running (a rescued job
# may wait for its retry before it starts again), the latest started kept.
REMEMBERED_RUNS = 1000
SHOWN_JOBS = 20  # rescued jobs in the evidence


@dataclass(frozen=True, slots=True)
class RunMemory:
    """What one queue's readings so far say about its jobs' starts."""

    seen: Mapping[str, QueueJobRun] = field(default_factory=dict)  # job id -> its latest start
    # Job id -> (the start before, the start after) of a job started again
    # after a rescue, while that second start runs and no worker of the first
    # has been seen alive yet.
    restarts: Mapping[str, tuple[QueueJobRun, QueueJobRun]] = field(default_factory=dict)
    rescued: Mapping[str, RescuedJobFacts] = field(default_factory=dict)  # job id -> its two starts


def _facts(run: QueueJobRun) -> QueueRunFacts:
    return QueueRunFacts(run.attempt, run.started_at, run.workers)


def _remembered(seen: Mapping[str, QueueJobRun], running: RunningJobs) -> dict[str, QueueJobRun]:
    """The latest start of every job seen, at most REMEMBERED_RUNS of them."""
    merged = {**seen, **{run.job_id: run for run in running.runs}}
    if len(merged) <= REMEMBERED_RUNS:
        return merged
    latest = sorted(merged.values(), key=lambda r: (r.started_at, r.job_id), reverse=True)
    return {run.job_id: run for run in latest[:REMEMBERED_RUNS]}


def _restarts(
    running: RunningJobs, memory: RunMemory
) -> dict[str, tuple[QueueJobRun, QueueJobRun]]:
    """Every job running now at a start that followed a rescue of a start
    lockwatch saw: the ones remembered whose second start still runs, and the
    new ones."""
    restarts = {}
    for run in running.runs:
        known = memory.restarts.get(run.job_id)
        before = memory.seen.get(run.job_id)
        if known is not None and known[1].attempt == run.attempt:
            restarts[run.job_id] = known
        elif run.rescued and before is not None and run.attempt > before.attempt:
            restarts[run.job_id] = (before, run)
    return restarts


def rescued_runs(running: RunningJobs, memory: RunMemory) -> RunMemory:
    """The queue's memory after a reading of its running jobs. A restart is a
    duplicate once a worker of its first start is seen alive while the second
    runs, and stays one until that second start ends."""
    now_running = {run.job_id: run for run in running.runs}
    rescued = {
        job: facts
        for job, facts in memory.rescued.items()
        if (run := now_running.get(job)) is not None and run.attempt == facts.second.attempt
    }
    pending = {}
    for job, (first, second) in _restarts(running, memory).items():
        if job in rescued:
            continue
        alive = tuple(w for w in first.workers if w in running.live_workers)
        if alive:
            rescued[job] = RescuedJobFacts(job, _facts(first), _facts(second), alive)
        else:
            pending[job] = (first, second)
    return RunMemory(_remembered(memory.seen, running), pending, rescued)


def _summary(queue: str, evidence: RescuedRunsEvidence, now: datetime) -> str:
    job = evidence.jobs[0]
    more = f" and {evidence.count - 1} more" if evidence.count > 1 else ""
    first = ", ".join(one_line(w) for w in job.alive)
    return (
        f"queue {one_line(queue)}: job {one_line(job.job_id)}{more} started again "
        f"{format_duration((now - job.second.started_at).total_seconds())} ago (attempt "
        f"{job.second.attempt}) after its library rescued it, while the worker of its "
        f"attempt {job.first.attempt} still lives ({first}): it may run twice at once"
    )


def detect_rescued_running(
    target: str, queue: str, memory: RunMemory, now: datetime
) -> Finding | None:
    """The queue's finding while any rescued job's second start runs."""
    if not memory.rescued:
        return None
    jobs = sorted(memory.rescued.values(), key=lambda j: (j.second.started_at, j.job_id))
    evidence = RescuedRunsEvidence(queue, tuple(jobs[:SHOWN_JOBS]), len(jobs))
    return Finding(
        FindingKind.JOB_RESCUED_WHILE_RUNNING,
        target,
        Subject(queue=queue),
        Severity.CRITICAL,
        jobs[0].second.started_at,
        _summary(queue, evidence, now),
        evidence,
    )
