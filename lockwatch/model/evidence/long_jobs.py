"""The evidence of ``queue_job_too_long``: queue library jobs running far past
their task's own history or a configured budget."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lockwatch.model.evidence.sessions import FindingFacts


@dataclass(frozen=True, slots=True)
class LongJobFacts:
    """One job running past its budget, as its library records it."""

    job_id: str
    task: str | None  # the library's task (or job name); None: not told
    attempt: int
    started_at: datetime
    running_seconds: float
    budget_seconds: float
    # Where the budget comes from: "max_job_duration", or what the task's
    # recent runs say ("usually 1s, p99 2s over 30 runs").
    budget_from: str
    workers: tuple[str, ...]  # the library's workers that may run it
    sessions: tuple[int, ...]  # their database sessions' pids, when told
    # When the library itself acts on it (pg-boss's expiry, graphile-worker's
    # lock expiry) and what it does; None: it never does.
    library_deadline: datetime | None
    library_action: str | None
    # False: the library ties no running job to a live worker, so whether its
    # worker still lives cannot be told (graphile-worker).
    liveness_told: bool = True


@dataclass(frozen=True, slots=True)
class LongJobsEvidence(FindingFacts):
    """Jobs of a queue running far longer than their budget."""

    queue: str
    jobs: tuple[LongJobFacts, ...]  # the longest running first, at most 20
    count: int  # every such job running now
