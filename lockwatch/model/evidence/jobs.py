"""The evidence of job findings: the runs behind each, as their sources reported them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lockwatch.model.evidence.sessions import FindingFacts
from lockwatch.model.jobs import RunStatus


@dataclass(frozen=True, slots=True)
class RunFacts:
    run_key: str | None  # as the job gave it
    run_id: str | None
    started_at: datetime
    finished_at: datetime | None
    status: RunStatus
    host: str | None
    source: str  # sql, ping or exec
    exit_code: int | None
    duration_seconds: float  # so far, for a run still going
    # The run's own process on ``host`` (``lockwatch exec`` says it); None: not told.
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class JobEvidence(FindingFacts):
    job: str


@dataclass(frozen=True, slots=True)
class DuplicateStartEvidence(JobEvidence):
    run_key: str  # the one the latest repeat started for
    starts: tuple[RunFacts, ...]  # of that run key, the first first
    duplicate_run_keys: tuple[str, ...]  # every run key started more than once lately


@dataclass(frozen=True, slots=True)
class OverlapEvidence(JobEvidence):
    runs: tuple[RunFacts, ...]  # running now, the oldest first


@dataclass(frozen=True, slots=True)
class MissedRunEvidence(JobEvidence):
    slot: datetime  # the latest slot due
    grace_seconds: float
    missed_slots: tuple[datetime, ...]  # the last ten in the look-back
    last_start: datetime | None


@dataclass(frozen=True, slots=True)
class LongRunEvidence(JobEvidence):
    max_duration_seconds: float
    runs: tuple[RunFacts, ...]  # running past it, the oldest first


@dataclass(frozen=True, slots=True)
class FailedRunEvidence(JobEvidence):
    run: RunFacts  # the last one that finished
