"""The evidence of queue findings: the queue's window, its worker groups, and
for a stall, the advisory lock its workers wait on."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime

from lockwatch.model.evidence.sessions import FindingFacts, LockHolderFacts
from lockwatch.model.queues import SessionWait


@dataclass(frozen=True, slots=True)
class SessionCounts:
    """A worker group's database sessions by what they are doing."""

    active: int
    waiting_lock: int
    idle: int
    idle_in_transaction: int
    other: int


SESSION_STATES = tuple(field.name for field in fields(SessionCounts))


# What workers that use (almost) no CPU are doing: they want a CPU and do not
# get it (runnable, on a run queue: starved, never stalled), or they wait on
# something else (a lock, I/O, a sleep: not runnable).
STARVED = "starved"
WAITING = "waiting"
CPU_STATES = (STARVED, WAITING)


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    """A worker group bound to the queue, over the queue's window."""

    name: str
    processes: int | None  # at the last CPU reading; None without one
    cpu_cores: float | None  # average cores used; None until the readings cover the window
    sessions: SessionCounts | None  # None: the group binds no sessions
    waiting_on: tuple[SessionWait, ...]  # most waiting sessions first
    # The cores' worth of time its processes were runnable and waited for a
    # CPU (run-queue delay; a cgroup's CPU pressure); None: not measured.
    cpu_wait_cores: float | None = field(default=None, kw_only=True)
    runnable: int | None = field(default=None, kw_only=True)  # at the last reading
    # The share of the window some task of the host waited for a CPU (PSI).
    host_cpu_pressure: float | None = field(default=None, kw_only=True)
    # STARVED or WAITING (CPU_STATES); None: not told (no run-queue reading,
    # or it used CPU enough)
    cpu_state: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class QueueLockChain:
    """The lock most of the queue's worker sessions wait on: an advisory
    lock, else a lock of another locktype, whose holder is the root of their
    waits (a row a hung worker claimed with FOR UPDATE)."""

    database: str
    lock: str  # the configured name, or the key; of another locktype, what it is on in words
    key: str
    waiting_sessions: int
    worker_sessions: int
    holders: tuple[LockHolderFacts, ...]  # by pid; empty: the holder was not seen
    # the locktype they wait on: advisory, or the first of the root's waits
    locktype: str = field(default="advisory", kw_only=True)


@dataclass(frozen=True, slots=True)
class QueueEvidence(FindingFacts):
    """A queue over its window: depth, growth, completions, worker CPU."""

    queue: str
    depth: int
    depth_at_window_start: int
    oldest_age_seconds: float | None
    in_flight: int | None
    growth_per_second: float  # the least-squares slope of the depth
    fit_r2: float  # how well that line explains the depth, 0..1
    window_seconds: float
    samples: int
    completed_total: int | None
    completed_in_window: int | None  # None unless every sample reports completions
    worker_cpu_cores: float | None  # the bound groups together; None: not measured
    stall_cpu_cores: float
    workers: tuple[WorkerFacts, ...]
    # The bound groups' run-queue time together, as cores; None: not measured.
    worker_cpu_wait_cores: float | None = field(default=None, kw_only=True)
    worker_cpu_state: str | None = field(default=None, kw_only=True)  # as WorkerFacts'


@dataclass(frozen=True, slots=True)
class QueueStallEvidence(QueueEvidence):
    lock: QueueLockChain | None  # None: its workers wait on no lock

    @classmethod
    def of(cls, queue: QueueEvidence, lock: QueueLockChain | None) -> QueueStallEvidence:
        """The queue's evidence, with the lock its workers wait on."""
        return cls(
            **{field.name: getattr(queue, field.name) for field in fields(QueueEvidence)}, lock=lock
        )

    @property
    def named_holders(self) -> tuple[LockHolderFacts, ...]:
        return () if self.lock is None else self.lock.holders


@dataclass(frozen=True, slots=True)
class StuckJobsEvidence(FindingFacts):
    """Jobs marked running whose worker session is gone."""

    queue: str
    stuck_count: int
    job_ids: tuple[str, ...]  # the oldest first, at most the source's limit
    since: datetime | None  # when the oldest was taken
    depth: int  # the queue's pending work behind them


@dataclass(frozen=True, slots=True)
class QueueRunFacts:
    """One start of a queue library's job."""

    attempt: int
    started_at: datetime
    # The library's workers that may run it (one of them, when several); ()
    # when the library records no worker per job (pg-boss 10 and 11).
    workers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RescuedJobFacts:
    """A job started again while the worker of its earlier start still lives."""

    job_id: str
    first: QueueRunFacts  # the start lockwatch saw before the rescue
    second: QueueRunFacts  # the start after it
    alive: tuple[str, ...]  # the first start's workers still alive at the second
    # How many of the first start's workers (or, untold, the library's sessions
    # of its time) were alive at the second; len(alive) when they are named.
    alive_count: int
    # The library shows the first start's handler still running (pg-boss 12.38:
    # its worker still handles the batch it fetched then, past its timeout).
    still_handling: bool = False


@dataclass(frozen=True, slots=True)
class RescuedRunsEvidence(FindingFacts):
    """Jobs a queue library rescued (or timed out) and started again while the
    worker of their first start still lives: two runs of one job at once."""

    queue: str
    jobs: tuple[RescuedJobFacts, ...]  # the earliest second start first, at most 20
    count: int  # every such job running now


@dataclass(frozen=True, slots=True)
class ConsumerCount:
    """Consumers of a queue that one source sees alive: the queue library's own
    record (its workers, instances or heartbeats), or a bound worker group's
    database sessions or processes."""

    source: str  # "library", or "<group> sessions" / "<group> processes"
    count: int


@dataclass(frozen=True, slots=True)
class NoConsumerEvidence(FindingFacts):
    """Work waiting while no consumer of the queue is alive."""

    queue: str
    depth: int
    oldest_age_seconds: float | None
    since: datetime  # the first reading with work waiting and no consumer
    budget_seconds: float  # how long that may last before the finding (no_consumer_after)
    consumers: tuple[ConsumerCount, ...]  # every source that tells, all at 0
