"""Validated queue and worker-group configuration, as frozen values.

``config.py`` (through ``config_queues.py``) builds these; the samplers and
detectors only read them. Presets are resolved at load time into the plain
sources below, so nothing downstream knows about queue libraries except the
samplers that speak their Redis layout.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class QueueThresholds:
    window: float = 300.0  # seconds of history a queue is judged over
    min_growth: float = 0.05  # items per second of steady growth that make queue_growing
    stall_cpu: float = 0.1  # cores: bound workers using less than this are doing nothing


@dataclass(frozen=True, slots=True)
class SqlQueueSource:
    """An SQL query run in lockwatch's read-only session of the target.

    It returns ``depth`` and optionally ``oldest_age_seconds``,
    ``completed_total`` and ``in_flight``: one row, or with ``sub_queues`` one
    row per sub-queue with a ``queue`` column naming it.
    """

    query: str
    params: Mapping[str, object] = field(default_factory=dict)  # presets only
    sub_queues: tuple[str, ...] = ()


class RedisType(enum.StrEnum):
    LIST = "list"
    ZSET = "zset"
    STREAM = "stream"


@dataclass(frozen=True, slots=True)
class RedisQueueSource:
    url: str = field(repr=False)  # may hold a password: never log or show it
    keys: tuple[str, ...]  # plain: summed lengths; a preset's layout: the library's queue name
    # How the queue lives in Redis: "plain" keys, or the name of the preset
    # (sample/presets) whose library keeps it so.
    layout: str = "plain"
    type: RedisType = RedisType.LIST
    group: str | None = None  # a stream's consumer group: its lag and pending entries
    timeout: float = 2.0  # seconds, for connecting and for each reply


QueueSource = SqlQueueSource | RedisQueueSource


@dataclass(frozen=True, slots=True)
class Queue:
    name: str  # letters, digits, _ . -; a metric label
    source: QueueSource
    thresholds: QueueThresholds = field(default_factory=QueueThresholds)
    interval: float | None = None  # None: sampled at every poll of the target
    preset: str | None = None  # the library the source was made for, when one was named

    @property
    def names(self) -> tuple[str, ...]:
        """The queues this entry watches: itself, or ``name/sub`` per sub-queue."""
        if isinstance(self.source, SqlQueueSource) and self.source.sub_queues:
            return tuple(f"{self.name}/{sub}" for sub in self.source.sub_queues)
        return (self.name,)


@dataclass(frozen=True, slots=True)
class ProcessMatch:
    """Local processes: command lines matching a regular expression, or the
    pid in a pidfile; with their children unless told otherwise."""

    cmdline: str | None = None  # a regular expression searched in the joined command line
    pidfile: Path | None = None
    children: bool = True


@dataclass(frozen=True, slots=True)
class CgroupCpu:
    """A cgroup v2 directory (a systemd unit's), read from ``cpu.stat``."""

    path: str  # relative to root, e.g. system.slice/webhook-worker.service
    root: Path = DEFAULT_CGROUP_ROOT


@dataclass(frozen=True, slots=True)
class PrometheusCpu:
    """A Prometheus instant query returning CPU seconds (a counter), e.g. a
    sum over process-exporter's namedprocess_namegroup_cpu_seconds_total."""

    url: str = field(repr=False)  # may hold credentials
    cpu_query: str
    processes_query: str | None = None
    timeout: float = 5.0


CpuSource = ProcessMatch | CgroupCpu | PrometheusCpu


@dataclass(frozen=True, slots=True)
class WorkerGroup:
    name: str
    queues: tuple[str, ...]  # the queues (as in Queue.names) whose work it does
    cpu: CpuSource | None = None
    sessions: tuple[str, ...] = ()  # application_name patterns (* and ?) of its sessions
    interval: float | None = None
