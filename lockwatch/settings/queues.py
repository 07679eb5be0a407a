"""Validated queue and worker-group configuration, as frozen values.

:mod:`lockwatch.config.queues` reads these from a config file; the samplers
and detectors only read them. Presets are resolved at load time into the plain
sources below, so nothing downstream knows about queue libraries except the
samplers that speak their Redis layout.
"""

from __future__ import annotations

import enum
import functools
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Self

from pydantic import Field, PlainValidator, TypeAdapter, model_validator

from lockwatch.settings.fields import (
    INTERNAL,
    POSITIVE,
    UNIQUE,
    Budget,
    FilePath,
    Flag,
    Interval,
    Learned,
    Name,
    Number,
    PositiveSeconds,
    Secret,
    Section,
    Text,
    Whole,
    at_least,
    check,
    not_empty,
    one_of,
    problem_at,
    to_text,
    unique_items,
)
from lockwatch.util.secrets import dsn_password

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
_URL_WITHHELD = "(the URL is not shown: it may hold a password)"


def url_password(url: str) -> str | None:
    """The password in a URL (or a DSN), so it can be redacted wherever it shows up.

    >>> url_password("redis://:s%40cret@127.0.0.1:6379/0")
    's@cret'
    """
    try:
        password = urllib.parse.urlsplit(url).password
    except ValueError:
        return None
    return urllib.parse.unquote(password) if password else dsn_password(url)


def url_check(*schemes: str) -> Callable[[str], str | None]:
    def check_url(url: str) -> str | None:
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError:
            return f"not a valid URL {_URL_WITHHELD}"
        if parts.scheme not in schemes:
            return f"must start with {' or '.join(s + '://' for s in schemes)} {_URL_WITHHELD}"
        if parts.scheme != "unix" and not parts.hostname:
            return f"has no host {_URL_WITHHELD}"
        return None

    return check_url


def _check_regex(text: str) -> str | None:
    try:
        re.compile(text)
    except re.error as exc:
        return f"not a regular expression: {exc}"
    return None


_PATTERN = re.compile(r"[^\[\]]+")


def _check_pattern(text: str) -> str | None:
    if _PATTERN.fullmatch(text):
        return None
    return f"application_name patterns take * and ? only, not brackets: {text!r}"


def _check_cgroup_path(text: str) -> str | None:
    path = PurePosixPath(text)
    if path.is_absolute() or ".." in path.parts:
        return f"must be relative to the cgroup root, without '..': {text!r}"
    return None


def _to_keys(value: object) -> tuple[str, ...]:
    """One key, or a list of them."""
    if isinstance(value, list):
        return _keys_adapter().validate_python(value)
    return (to_text(value),)


@functools.cache
def _keys_adapter() -> TypeAdapter[tuple[str, ...]]:
    """Built by the first list of keys read, not at import: a pydantic adapter
    costs milliseconds, and most configs have no such list."""
    return TypeAdapter(tuple[Text, ...])


RedisUrl = Annotated[Text, check(url_check("redis", "rediss", "unix"))]
HttpUrl = Annotated[Text, check(url_check("http", "https"))]
UrlSecret = Secret(from_file=False, part=url_password)


@dataclass(frozen=True, slots=True)
class QueueThresholds(Section):
    window: PositiveSeconds = 300.0  # seconds of history a queue is judged over
    # items per second of steady growth that make queue_growing
    min_growth: Annotated[Number, POSITIVE] = 0.05
    # cores: bound workers using less than this are doing nothing
    stall_cpu: Annotated[Number, POSITIVE] = 0.1
    # seconds work may wait with no consumer alive before queue_no_consumer
    no_consumer_after: PositiveSeconds = 120.0
    # a running job past this -> queue_job_too_long; auto: learned per task from
    # its library's recent successful runs (factor x p99 once there are enough)
    max_job_duration: Budget = Learned.AUTO
    job_duration_floor: PositiveSeconds = 60.0  # seconds no learned job budget goes below
    # queue_capacity_lost: completions per minute over capacity_window below this
    # share of the queue's learned normal (learned over capacity_learning from
    # the minutes work waited, once there are capacity_min_minutes of them)
    capacity_fraction: Annotated[Number, POSITIVE] = 0.6
    capacity_window: PositiveSeconds = 900.0
    capacity_learning: PositiveSeconds = 7 * 86400.0
    capacity_min_minutes: Annotated[Whole, at_least(1)] = 60


@dataclass(frozen=True, slots=True)
class SchemaRelease:
    """The query of one range of a library's schema versions."""

    first: int  # the library's schema versions this query reads, first to last
    last: int
    releases: str  # the library's releases with those schema versions, for people
    query: str


@dataclass(frozen=True, slots=True)
class LibrarySchema:
    """A preset's library whose tables change between its releases: the query
    that reads the installed schema's version, and one query per range."""

    library: str
    version_query: str  # one row, one column ``version``: an integer
    ranges: tuple[SchemaRelease, ...]  # oldest first


@dataclass(frozen=True, slots=True)
class SqlQueueSource(Section):
    """An SQL query run in lockwatch's read-only session of the target.

    It returns ``depth`` and optionally ``oldest_age_seconds``,
    ``completed_total`` and ``in_flight``: one row, or with ``sub_queues`` one
    row per sub-queue with a ``queue`` column naming it.
    """

    query: Annotated[Text, Field(alias="sql")]
    params: Annotated[Mapping[str, object], INTERNAL] = field(default_factory=dict)  # presets only
    # A preset's library read by the installed schema's version; None: ``query``.
    schema: Annotated[LibrarySchema | None, INTERNAL] = None
    sub_queues: Annotated[
        tuple[Text, ...], unique_items(repr), not_empty("needs at least one sub-queue")
    ] = ()


class RedisType(enum.StrEnum):
    LIST = "list"
    ZSET = "zset"
    STREAM = "stream"


@dataclass(frozen=True, slots=True)
class RedisQueueSource(Section):
    # may hold a password: never log or show it
    url: Annotated[RedisUrl, UrlSecret, Field(alias="redis")] = field(repr=False)
    # plain: summed lengths; a preset's layout: the library's queue name
    keys: Annotated[tuple[str, ...], PlainValidator(_to_keys), Field(alias="key")]
    # How the queue lives in Redis: "plain" keys, or the name of the preset
    # (sample/presets) whose library keeps it so.
    layout: Annotated[str, INTERNAL] = "plain"
    type: Annotated[RedisType, one_of(RedisType, "type")] = RedisType.LIST
    group: Text | None = None  # a stream's consumer group: its lag and pending entries
    timeout: PositiveSeconds = 2.0  # seconds, for connecting and for each reply

    @model_validator(mode="after")
    def _stream_only(self) -> Self:
        if self.group is not None and self.type is not RedisType.STREAM:
            raise problem_at(("group",), "only a stream has groups", self.group)
        if self.type is RedisType.STREAM and len(self.keys) > 1:
            raise problem_at(("key",), "a stream queue reads one key", list(self.keys))
        return self


QueueSource = SqlQueueSource | RedisQueueSource


@dataclass(frozen=True, slots=True)
class Queue(Section):
    name: Annotated[Name, UNIQUE]  # letters, digits, _ . -; a metric label
    source: QueueSource
    thresholds: QueueThresholds = field(default_factory=QueueThresholds)
    interval: Interval | None = None  # None: sampled at every poll of the target
    preset: Text | None = None  # the library the source was made for, when one was named

    @property
    def names(self) -> tuple[str, ...]:
        """The queues this entry watches: itself, or ``name/sub`` per sub-queue."""
        if isinstance(self.source, SqlQueueSource) and self.source.sub_queues:
            return tuple(f"{self.name}/{sub}" for sub in self.source.sub_queues)
        return (self.name,)


@dataclass(frozen=True, slots=True)
class ProcessMatch(Section):
    """Local processes: command lines matching a regular expression, or the
    pid in a pidfile; with their children unless told otherwise."""

    # a regular expression searched in the joined command line
    cmdline: Annotated[Text, check(_check_regex)] | None = None
    pidfile: FilePath | None = None
    children: Flag = True

    @model_validator(mode="after")
    def _matches_something(self) -> Self:
        if self.cmdline is None and self.pidfile is None:
            raise ValueError("set 'cmdline' (a regular expression) or 'pidfile'")
        return self


@dataclass(frozen=True, slots=True)
class CgroupCpu(Section):
    """A cgroup v2 directory (a systemd unit's), read from ``cpu.stat``."""

    # relative to root, e.g. system.slice/webhook-worker.service
    path: Annotated[Text, check(_check_cgroup_path)]
    root: FilePath = DEFAULT_CGROUP_ROOT


@dataclass(frozen=True, slots=True)
class PrometheusCpu(Section):
    """A Prometheus instant query returning CPU seconds (a counter), e.g. a
    sum over process-exporter's namedprocess_namegroup_cpu_seconds_total."""

    url: Annotated[HttpUrl, UrlSecret] = field(repr=False)  # may hold credentials
    cpu_query: Annotated[Text, Field(alias="cpu")]
    processes_query: Annotated[Text | None, Field(alias="processes")] = None
    timeout: PositiveSeconds = 5.0


CpuSource = ProcessMatch | CgroupCpu | PrometheusCpu


@dataclass(frozen=True, slots=True)
class WorkerGroup(Section):
    name: Annotated[Name, UNIQUE]
    queues: tuple[Text, ...]  # the queues (as in Queue.names) whose work it does
    cpu: CpuSource | None = None
    # application_name patterns (* and ?) of its sessions
    sessions: tuple[Annotated[Text, check(_check_pattern)], ...] = ()
    interval: Interval | None = None
