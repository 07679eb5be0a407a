"""Queue and worker readings, and the views the publishers show of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class StuckJobs:
    """Jobs the queue's library marks running whose worker session is gone,
    as a preset's query finds them."""

    count: int
    job_ids: tuple[str, ...]  # the oldest first, at most the query's own limit
    since: datetime | None  # when the oldest of them was taken by its worker


@dataclass(frozen=True, slots=True)
class QueueJobRun:
    """One run of a job its queue library marks running, as a preset reads it."""

    job_id: str
    attempt: int  # the library's count of the job's starts (or of its retries)
    started_at: datetime
    # Who may be running it: the library's worker ids, or the library's sessions
    # that were there when it started (pg-boss records no worker).
    workers: tuple[str, ...]
    # The library's record says its previous attempt was ended by its rescuer
    # or a timeout, not by the worker that ran it.
    rescued: bool
    # The batches its workers were handling at a beat after it started, as
    # (worker, batch) pairs (pg-boss 12.38: a work() call and when it fetched);
    # () when the library does not tell or no worker has beaten since.
    handling: tuple[tuple[str, str], ...] = ()
    # False: ``workers`` are the library's sessions of its time, any of which
    # may run it (pg-boss 10 and 11 record no worker): not to be named as its worker.
    workers_told: bool = True
    # False: the library ties no running job to a live worker or connection
    # (graphile-worker): a job whose worker died is told only by its duration.
    liveness_told: bool = True
    task: str | None = None  # the library's task (or job name) it runs; None: not told
    sessions: tuple[int, ...] = ()  # the pids of its worker's database sessions, when told
    # When the library itself will act on it if it is still running (pg-boss's
    # expiry, graphile-worker's 4-hour lock), and what it will do; None: never.
    library_deadline: datetime | None = None
    library_action: str | None = None


@dataclass(frozen=True, slots=True)
class TaskHistory:
    """A task's recent successful runs, as its library's own rows record them."""

    runs: int
    p50_seconds: float
    p99_seconds: float


@dataclass(frozen=True, slots=True)
class RunningJobs:
    """The jobs running now, as a preset's query reads them."""

    runs: tuple[QueueJobRun, ...]  # the latest started first, at most the query's own limit
    live_workers: frozenset[str]  # the library's workers (or sessions) alive now
    # The (worker, batch) pairs live workers are handling now, a handler kept
    # past its library's timeout included (pg-boss 12.38); None: not told.
    busy: frozenset[tuple[str, str]] | None = None


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One reading of one queue. ``depth`` is the pending work; the rest is
    known only when the source tells it."""

    at: datetime
    depth: int
    oldest_age_seconds: float | None = None  # age of the oldest pending item
    completed_total: int | None = None  # finished items, as a count that only grows
    in_flight: int | None = None  # taken by a worker, not finished
    stuck: StuckJobs | None = None  # None: the source cannot tell
    # The consumers the queue's library knows alive now (workers, instances
    # with a heartbeat or a session of theirs); None: the source cannot tell.
    consumers: int | None = None
    # The running jobs, one by one; None: the source cannot tell. Only the
    # latest reading keeps them (the queue monitor drops them from its history).
    running: RunningJobs | None = None
    # Per task, its recent successful runs (queue_job_too_long learns from
    # them); None: the source cannot tell. Only the latest reading keeps it.
    task_history: Mapping[str, TaskHistory] | None = None


@dataclass(frozen=True, slots=True)
class WorkerSample:
    """The CPU a worker group had used by ``at``."""

    at: datetime
    # CPU seconds of all the group's processes, as a counter: what a process
    # used before lockwatch first saw it counts once, at that first sight.
    cpu_seconds: float
    processes: int | None = None
    # Seconds its processes were runnable and waited for a CPU (summed over
    # the processes, a counter like cpu_seconds; for a cgroup, its PSI time):
    # what tells a starved worker from one that waits on something else.
    # None: the source cannot tell (Prometheus, a kernel without schedstat).
    cpu_wait_seconds: float | None = None
    runnable: int | None = None  # processes runnable at the reading; None: not known
    # The host's CPU pressure counter (PSI some total, seconds); None: not read.
    host_pressure_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class QueueView:
    """One queue as the metrics and the API show it."""

    name: str
    source: str  # the name of the source that reads it
    window: float  # seconds the growth rate is measured over
    latest: QueueSample | None = None
    # least-squares slope of the depth over the window; None before 2 samples
    growth_per_second: float | None = None
    workers: tuple[str, ...] = ()  # the worker groups bound to it
    # Seconds the longest-running job of its library has run; None: not told.
    longest_job_seconds: float | None = None
    # Its learned completions per minute while work waits; None while learned.
    normal_completed_per_minute: float | None = None
    # When its last reading was observed, kept when it is too old to show
    # (``latest`` is then None: unknown); None: never read.
    observed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SessionWait:
    """Sessions of a worker group that wait on one advisory lock."""

    database: str
    lock: str  # the configured name or the key as written
    key: str
    sessions: int


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker group as the metrics and the API show it."""

    name: str
    queues: tuple[str, ...]
    window: float
    latest: WorkerSample | None = None  # None without a CPU source or before a reading
    cpu_cores: float | None = None  # average cores used over the window
    # Sessions by state (active, waiting_lock, idle, idle_in_transaction,
    # other); None when the group binds no sessions.
    sessions: Mapping[str, int] | None = None
    waiting_on: tuple[SessionWait, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueMinute:
    """One minute of a queue's readings: what it completed and how its backlog
    and consumers stood (queue_capacity_lost learns and judges from these)."""

    start: datetime  # the minute's first reading
    completed: int  # completions counted over the minute (only increases count)
    depth_first: int
    depth_last: int
    depth_min: int  # 0: the queue ran dry, so demand, not capacity, set the pace
    oldest_age_last: float | None = None
    in_flight_last: int | None = None  # busy slots, where the library records them
    consumers_last: int | None = None


@dataclass(frozen=True, slots=True)
class ThroughputNormal:
    """A queue's learned normal while work waited: its completions per minute,
    busy slots and consumers (medians over its saturated minutes)."""

    completed_per_minute: float
    minutes: int  # saturated minutes it was learned from
    in_flight: float | None = None
    consumers: float | None = None
