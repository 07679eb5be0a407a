"""Jobs a queue library started again while the worker of their earlier start
still lives (``job_rescued_while_running``): Oban's Lifeline and River's
rescuer move a job back by its age alone, and pg-boss gives up on a handler
after its expiry without stopping it, so a slow job runs twice at once.

Told from consecutive readings of the running jobs: a job seen running at
attempt N by workers W, then running at a later attempt that the library
says followed a rescue (not a failure its worker reported), while one of W is
seen alive during that later start. Where the library shows which batch each
worker is handling (pg-boss 12.38: a handler kept past its timeout holds its
worker), the finding lasts while a worker of the first start still handles
the batch it had then, whatever became of the later start; elsewhere it
lasts while the later start runs and a worker of the first is alive. Pure:
the readings and what the last poll remembered come in, findings and what to
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
class Duplicate:
    """A job found running twice at once: its evidence, and its first start
    as read (with the batches its workers were handling)."""

    facts: RescuedJobFacts
    first: QueueJobRun


@dataclass(frozen=True, slots=True)
class RunMemory:
    """What one queue's readings so far say about its jobs' starts."""

    seen: Mapping[str, QueueJobRun] = field(default_factory=dict)  # job id -> its latest start
    # Job id -> (the start before, the start after) of a job started again
    # after a rescue, while that second start runs and no worker of the first
    # has been seen alive yet.
    restarts: Mapping[str, tuple[QueueJobRun, QueueJobRun]] = field(default_factory=dict)
    rescued: Mapping[str, Duplicate] = field(default_factory=dict)  # job id -> its two starts


def _facts(run: QueueJobRun) -> QueueRunFacts:
    return QueueRunFacts(run.attempt, run.started_at, run.workers if run.workers_told else ())


def _still_handling(first: QueueJobRun, running: RunningJobs) -> tuple[str, ...] | None:
    """The first start's workers still handling the batch they had then; None
    when the library does not tell, or told nothing of that start."""
    if running.busy is None or not first.handling:
        return None
    return tuple(
        sorted({worker for worker, batch in first.handling if (worker, batch) in running.busy})
    )


def _alive(first: QueueJobRun, running: RunningJobs) -> tuple[str, ...]:
    return tuple(w for w in first.workers if w in running.live_workers)


def _lasts(duplicate: Duplicate, run: QueueJobRun | None, running: RunningJobs) -> bool:
    handling = _still_handling(duplicate.first, running)
    if handling is not None:
        return bool(handling)
    second = duplicate.facts.second
    return (
        run is not None and run.attempt == second.attempt and bool(_alive(duplicate.first, running))
    )


def _duplicate(
    job: str, first: QueueJobRun, second: QueueJobRun, running: RunningJobs
) -> Duplicate | None:
    """The restart as a duplicate when a worker of its first start is seen
    alive (or, where told, still handling it); else None."""
    handling = _still_handling(first, running)
    alive = _alive(first, running) if handling is None else handling
    if not alive:
        return None
    named = alive if first.workers_told else ()
    facts = RescuedJobFacts(
        job, _facts(first), _facts(second), named, len(alive), still_handling=handling is not None
    )
    return Duplicate(facts, first)


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
    runs, and stays one while that first start's handler is seen running
    (where the library shows it), else until the second start ends."""
    now_running = {run.job_id: run for run in running.runs}
    rescued = {
        job: duplicate
        for job, duplicate in memory.rescued.items()
        if _lasts(duplicate, now_running.get(job), running)
    }
    pending = {}
    for job, (first, second) in _restarts(running, memory).items():
        if job in rescued:
            continue
        if duplicate := _duplicate(job, first, second, running):
            rescued[job] = duplicate
        else:
            pending[job] = (first, second)
    return RunMemory(_remembered(memory.seen, running), pending, rescued)


def _first_worker(job: RescuedJobFacts) -> str:
    """Who ran its first start and still lives, in words: named only when the
    library records its workers, and then as one of several when it does not
    record which of them took the job."""
    attempt = job.first.attempt
    if not job.alive:
        return (
            f"while the worker of its attempt {attempt} may still live (its library records"
            f" no worker per job; {job.alive_count} of its sessions from then are still"
            " connected, any of which may be it)"
        )
    names = ", ".join(one_line(w) for w in job.alive)
    does = "still handles it past its timeout" if job.still_handling else "still lives"
    if len(job.first.workers) > 1:
        return (
            f"while one of the {len(job.first.workers)} workers that may have run its attempt"
            f" {attempt} {does} ({names}; its library records no worker per job)"
        )
    return f"while the worker of its attempt {attempt} {does} ({names})"


def _summary(queue: str, evidence: RescuedRunsEvidence, now: datetime) -> str:
    job = evidence.jobs[0]
    more = f" and {evidence.count - 1} more" if evidence.count > 1 else ""
    return (
        f"queue {one_line(queue)}: job {one_line(job.job_id)}{more} started again "
        f"{format_duration((now - job.second.started_at).total_seconds())} ago (attempt "
        f"{job.second.attempt}) after its library rescued it, {_first_worker(job)}:"
        " it may run twice at once"
    )


def detect_rescued_running(
    target: str, queue: str, memory: RunMemory, now: datetime
) -> Finding | None:
    """The queue's finding while any rescued job's second start runs."""
    if not memory.rescued:
        return None
    jobs = sorted(
        (d.facts for d in memory.rescued.values()), key=lambda j: (j.second.started_at, j.job_id)
    )
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
