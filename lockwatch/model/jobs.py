"""Job runs as their sources report them, and a job as the publishers show it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a job, as its source reported it."""

    job: str
    run_key: str | None  # as the job gave it; None: the schedule slot decides
    started_at: datetime
    finished_at: datetime | None = None
    status: RunStatus = RunStatus.RUNNING
    host: str | None = None
    source: str = "sql"  # sql, ping or exec
    run_id: str | None = None
    exit_code: int | None = None
    pid: int | None = None  # the run's process on its host, when its wrapper said

    @property
    def running(self) -> bool:
        return self.status is RunStatus.RUNNING and self.finished_at is None


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the metrics, the API and the status page show it."""

    name: str
    source: str  # "sql" or "ping"
    starts_total: int = 0  # starts lockwatch has seen since it started
    duplicate_starts_total: int = 0  # of those, starts for a run key that had started already
    running: int = 0
    last_start: datetime | None = None
    last_success: datetime | None = None
    last_duration: float | None = None  # seconds, of the last finished run
    recent: tuple[JobRun, ...] = ()  # the latest runs, newest first
