"""What a queue preset is: a library our users run, named in the config instead
of SQL or Redis keys, and resolved at load time into a plain source.

A preset on PostgreSQL is a query over the library's tables; a preset on Redis
is a reader of the library's Redis layout. Each library is one module beside
this one, listed once in ``registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING

from lockwatch.model.queues import QueueSample
from lockwatch.settings.queues import (
    LibrarySchema,
    RedisQueueSource,
    SchemaRelease,
    SqlQueueSource,
)

if TYPE_CHECKING:
    import redis

# How one queue of a library's Redis layout reads: the client, the queue's
# name as the library spells it, and the time of the reading.
RedisReader = Callable[["redis.Redis", str, datetime], QueueSample]


@dataclass(frozen=True, slots=True)
class SqlPreset:
    """A library whose jobs live in the target's own database."""

    name: str
    description: str
    sql_file: str  # beside this module; %(queue)s is the queue, NULL for every queue
    # The query's other parameters: the library's own settings it judges by, at
    # their defaults (a test running the library with others replaces them).
    params: Mapping[str, object] = field(default_factory=dict)
    # Beside it too: the library's advisory locks held now on purpose (per-job
    # and liveness locks), as rows of database, key, name and purpose.
    held_locks_file: str | None = None
    # A library whose tables change between releases: the query of its schema
    # version, and (first, last, releases, sql file) per range of versions,
    # oldest first; sql_file is then the latest range's.
    version_sql: str | None = None
    schema_ranges: tuple[tuple[int, int, str, str], ...] = ()

    needs_redis = False

    def source(self, *, queue: str | None, redis_url: str | None, timeout: float) -> SqlQueueSource:
        schema = None
        if self.version_sql is not None:
            ranges = tuple(
                SchemaRelease(first, last, releases, _sql(name))
                for first, last, releases, name in self.schema_ranges
            )
            schema = LibrarySchema(self.name, self.version_sql, ranges)
        params = {**self.params, "queue": queue}
        return SqlQueueSource(_sql(self.sql_file), params=params, schema=schema)

    def held_locks_query(self) -> str | None:
        return None if self.held_locks_file is None else _sql(self.held_locks_file)


def _sql(name: str) -> str:
    return (resources.files(__package__) / name).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class RedisPreset:
    """A library whose queues live in Redis, read by ``read``."""

    name: str
    description: str
    default_queue: str  # the library's own default queue name
    read: RedisReader

    needs_redis = True

    def source(
        self, *, queue: str | None, redis_url: str | None, timeout: float
    ) -> RedisQueueSource:
        if redis_url is None:
            raise ValueError(f"the {self.name} preset needs 'redis' (the broker's URL)")
        return RedisQueueSource(
            redis_url, (queue or self.default_queue,), layout=self.name, timeout=timeout
        )


Preset = SqlPreset | RedisPreset


def text(value: bytes | str | None) -> str | None:
    """A Redis reply as text, however the client decoded it."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def age_seconds(now: datetime, then: datetime | None) -> float | None:
    """Seconds from ``then`` to ``now``, never negative; None when unknown.

    >>> from datetime import UTC
    >>> age_seconds(datetime(2026, 1, 1, 0, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))
    60.0
    """
    return None if then is None else max(0.0, (now - then).total_seconds())
