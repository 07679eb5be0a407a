"""The shared vocabulary: snapshot rows and findings. Plain immutable values, no I/O.

Samplers produce these, detectors read them, publishers render them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_INT32 = 1 << 32
_INT64 = 1 << 64


def _signed(value: int, bits: int) -> int:
    """Reinterpret an unsigned integer of ``bits`` width as two's complement.

    >>> _signed(0xFFFFFFFF, 32)
    -1
    >>> _signed(7, 32)
    7
    """
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


@dataclass(frozen=True, slots=True, order=True)
class LockKey:
    """An advisory lock key as the application wrote it.

    ``pair`` is False for a single bigint key (``pg_advisory_lock(42)``) and True
    for a two-int4 key (``pg_advisory_lock(7, 13)``); for a bigint ``first`` is
    the whole value and ``second`` is 0.
    """

    pair: bool
    first: int
    second: int = 0

    @classmethod
    def bigint(cls, value: int) -> LockKey:
        return cls(False, value, 0)

    @classmethod
    def int_pair(cls, key1: int, key2: int) -> LockKey:
        return cls(True, key1, key2)

    @classmethod
    def from_pg_locks(cls, classid: int, objid: int, objsubid: int) -> LockKey:
        """Decode the ``pg_locks`` columns of an advisory lock.

        A bigint key is split into its high half (``classid``) and low half
        (``objid``) with ``objsubid = 1``; a pair keeps key1 in ``classid`` and key2
        in ``objid`` with ``objsubid = 2``. Both columns are unsigned oids.

        >>> LockKey.from_pg_locks(0, 42, 1).render()
        '42'
        >>> LockKey.from_pg_locks(0xFFFFFFFF, 0xFFFFFFFF, 1).render()
        '-1'
        >>> LockKey.from_pg_locks(7, 13, 2).render()
        '7,13'
        """
        if objsubid == 2:
            return cls.int_pair(_signed(classid, 32), _signed(objid, 32))
        return cls.bigint(_signed((classid % _INT32) << 32 | (objid % _INT32), 64))

    @classmethod
    def parse(cls, text: str) -> LockKey:
        """Read a key the way operators write it in config: ``42``, ``-7`` or ``7,13``.

        >>> LockKey.parse(" 7, 13 ")
        LockKey(pair=True, first=7, second=13)
        """
        parts = [p.strip() for p in str(text).split(",")]
        try:
            numbers = [int(p, 10) for p in parts]
        except ValueError:
            raise ValueError(f"not an advisory lock key: {text!r}") from None
        if len(numbers) == 1:
            if not -(1 << 63) <= numbers[0] < 1 << 63:
                raise ValueError(f"bigint key out of range: {text!r}")
            return cls.bigint(numbers[0])
        if len(numbers) == 2:
            if not all(-(1 << 31) <= n < 1 << 31 for n in numbers):
                raise ValueError(f"int4 pair key out of range: {text!r}")
            return cls.int_pair(numbers[0], numbers[1])
        raise ValueError(f"not an advisory lock key: {text!r}")

    def render(self) -> str:
        return f"{self.first},{self.second}" if self.pair else str(self.first)

    def __str__(self) -> str:
        return self.render()


@dataclass(frozen=True, slots=True)
class Backend:
    """One server backend (a row of ``pg_stat_activity``) as lockwatch saw it."""

    pid: int
    backend_start: datetime | None
    database: str | None
    usename: str | None
    application_name: str
    client_addr: str | None  # None for a Unix-socket client
    state: str | None  # active, idle, idle in transaction, ...
    state_change: datetime | None
    xact_start: datetime | None
    query_start: datetime | None
    wait_event_type: str | None
    wait_event: str | None
    query: str  # truncated by the sampler
    # pg_blocking_pids(), filled only for backends that wait on a heavyweight lock
    blocked_by: tuple[int, ...] = ()
    # The client's TCP port: with client_addr it names the pooler connection a
    # backend serves, where pid alone could belong to another server.
    client_port: int | None = None

    @property
    def identity(self) -> tuple[int, datetime | None]:
        """A pid is reused by the server; pid + backend_start names one session."""
        return (self.pid, self.backend_start)

    @property
    def running_sql(self) -> bool:
        return self.state == "active"

    @property
    def waiting_on_lock(self) -> bool:
        return self.wait_event_type == "Lock"


@dataclass(frozen=True, slots=True)
class AdvisoryLock:
    """One advisory-lock row of ``pg_locks``: a granted hold or a wait."""

    database: str
    key: LockKey
    mode: str  # ExclusiveLock or ShareLock
    granted: bool
    pid: int
    wait_start: datetime | None = None  # PostgreSQL 14+, waiters only
    # When lockwatch first saw this backend hold (or wait for) this key in this
    # mode; filled by the hold tracker, never by the server.
    first_seen: datetime | None = None

    @property
    def shared(self) -> bool:
        return self.mode == "ShareLock"


@dataclass(frozen=True, slots=True)
class LockSnapshot:
    """Everything one poll of one target learnt about advisory locks."""

    target: str
    taken_at: datetime
    server_version: int  # server_version_num, e.g. 180001
    locks: tuple[AdvisoryLock, ...]
    # Every backend that holds or waits for an advisory lock, plus the backends
    # that block them (so a blocking chain can be followed past advisory locks).
    backends: Mapping[int, Backend] = field(default_factory=dict)
    poll_seconds: float = 0.0

    def holders(self, database: str, key: LockKey) -> list[AdvisoryLock]:
        return [
            lock
            for lock in self.locks
            if lock.granted and lock.database == database and lock.key == key
        ]


@dataclass(frozen=True, slots=True)
class TargetStatus:
    """How sampling one target went: the snapshot, or why there is none."""

    target: str
    checked_at: datetime
    snapshot: LockSnapshot | None
    error: str | None = None  # already free of secrets
    failing_since: datetime | None = None

    @property
    def up(self) -> bool:
        return self.snapshot is not None and self.error is None


# Pool modes in which a server connection is handed out per transaction or
# statement, so session state (advisory locks included) belongs to no client.
SHARED_POOL_MODES = frozenset({"transaction", "statement"})


@dataclass(frozen=True, slots=True)
class PoolerConnection:
    """One row of SHOW SERVERS or SHOW CLIENTS."""

    ptr: str
    link: str  # ptr of the peer it is paired with right now; "" when none
    database: str
    user: str
    state: str
    addr: str | None
    port: int | None
    local_addr: str | None
    local_port: int | None
    connect_time: str | None
    request_time: str | None
    application_name: str | None
    remote_pid: int | None = None  # servers: the backend's pid


@dataclass(frozen=True, slots=True)
class PoolerSnapshot:
    taken_at: datetime
    pool_modes: Mapping[tuple[str, str], str]  # (database, user) -> pool mode
    servers: tuple[PoolerConnection, ...]
    clients: tuple[PoolerConnection, ...]

    def server_for(self, pid: int, client_port: int | None) -> PoolerConnection | None:
        """The server connection whose backend is ``pid``.

        The port check tells apart equal pids on two servers behind one pooler:
        the backend's client port is the pooler's local port of that connection.
        """
        for server in self.servers:
            if server.remote_pid == pid and (
                client_port is None or server.local_port in (None, client_port)
            ):
                return server
        return None

    def client_linked_to(self, server: PoolerConnection) -> PoolerConnection | None:
        if not server.link:
            return None
        return next((client for client in self.clients if client.ptr == server.link), None)

    def pool_mode(self, server: PoolerConnection) -> str | None:
        return self.pool_modes.get((server.database, server.user))


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


class Severity(enum.StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class FindingKind(enum.StrEnum):
    LOCK_HELD_TOO_LONG = "lock_held_too_long"
    LOCK_CONVOY = "lock_convoy"
    LOCK_ORPHANED = "lock_orphaned"
    LOCK_POOLED_SESSION = "lock_pooled_session"
    LOCK_UNEXPECTED_HOLDER = "lock_unexpected_holder"
    LEADER_LOCK_MISSING = "leader_lock_missing"
    QUEUE_GROWING = "queue_growing"
    QUEUE_STALLED = "queue_stalled"
    JOB_DUPLICATE_START = "job_duplicate_start"
    JOB_OVERLAP = "job_overlap"
    JOB_MISSED = "job_missed"
    JOB_TOO_LONG = "job_too_long"
    JOB_FAILED = "job_failed"
    TARGET_DOWN = "target_down"


@dataclass(frozen=True, slots=True)
class Subject:
    """What a finding is about. Unused parts stay None."""

    database: str | None = None
    lock: str | None = None  # configured name, or the key as the application wrote it
    queue: str | None = None  # configured queue name
    job: str | None = None  # configured job name
    # A target's own source (``queue/webhooks``), for a target_down that is
    # about that source alone.
    source: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """``database`` and ``lock`` always (the API's stable shape), the rest when set."""
        extra = {
            name: value
            for name, value in (("queue", self.queue), ("job", self.job), ("source", self.source))
            if value
        }
        return {"database": self.database, "lock": self.lock, **extra}

    def render(self) -> str:
        parts = [p for p in (self.database, self.lock, self.queue, self.job, self.source) if p]
        return "/".join(parts) if parts else "-"


def subject_label(part: str) -> str:
    """The Prometheus label of a subject part. Prometheus owns ``job`` (the
    scrape job), so a subject's job is ``job_name``.

    >>> subject_label("job"), subject_label("queue")
    ('job_name', 'queue')
    """
    return "job_name" if part == "job" else part


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem, now. ``evidence`` holds JSON-ready facts (str, int, float,
    bool, None, lists and dicts of them)."""

    kind: FindingKind
    target: str
    subject: Subject
    severity: Severity
    since: datetime
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> tuple[str, str, Subject]:
        """Findings with the same identity are the same ongoing problem."""
        return (self.kind.value, self.target, self.subject)


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One reading of one queue. ``depth`` is the pending work; the rest is
    known only when the source tells it."""

    at: datetime
    depth: int
    oldest_age_seconds: float | None = None  # age of the oldest pending item
    completed_total: int | None = None  # finished items, as a count that only grows
    in_flight: int | None = None  # taken by a worker, not finished


@dataclass(frozen=True, slots=True)
class WorkerSample:
    """The CPU a worker group had used by ``at``."""

    at: datetime
    # CPU seconds of all the group's processes, as a counter: what a process
    # used before lockwatch first saw it counts once, at that first sight.
    cpu_seconds: float
    processes: int | None = None


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """How the last attempts to sample one of a target's sources went."""

    name: str
    up: bool = False
    checked_at: datetime | None = None
    error: str | None = None  # free of secrets
    # When it began failing on its own; None while fine, and while it merely
    # waits for its target's database to come back.
    failing_since: datetime | None = None
    samples_total: int = 0
    errors_total: int = 0

    def succeeded(self, now: datetime) -> SourceHealth:
        return SourceHealth(
            self.name, True, now, None, None, self.samples_total + 1, self.errors_total
        )

    def failed(self, now: datetime, error: str) -> SourceHealth:
        return SourceHealth(
            self.name,
            False,
            now,
            error,
            self.failing_since or now,
            self.samples_total + 1,
            self.errors_total + 1,
        )

    def skipped(self, now: datetime, reason: str) -> SourceHealth:
        return SourceHealth(
            self.name, False, now, reason, None, self.samples_total, self.errors_total
        )


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
