"""RQ (python-rq) on Redis: a queue is the list ``rq:queue:<name>`` (appended to,
taken from the head), with ``rq:wip:<name>``, ``rq:finished:<name>`` and
``rq:failed:<name>`` as sorted sets and each job a hash ``rq:job:<id>``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lockwatch.model.queues import QueueSample
from lockwatch.sample.presets.base import RedisPreset, age_seconds, text

if TYPE_CHECKING:
    import redis

PREFIX = "rq"


def enqueued_time(value: bytes | str | None) -> datetime | None:
    """RQ writes times as ``2025-03-14T21:40:00.123456Z`` (UTC).

    >>> enqueued_time(b"2025-03-14T21:40:00.5Z")
    datetime.datetime(2025, 3, 14, 21, 40, 0, 500000, tzinfo=datetime.timezone.utc)
    """
    written = text(value)
    if not written:
        return None
    try:
        return datetime.fromisoformat(written.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def read(client: redis.Redis, name: str, now: datetime) -> QueueSample:
    pipe = client.pipeline(transaction=False)
    pipe.llen(f"{PREFIX}:queue:{name}")
    pipe.lindex(f"{PREFIX}:queue:{name}", 0)  # RQ appends and takes from the head
    pipe.zcard(f"{PREFIX}:wip:{name}")
    # RQ's own record of finished jobs, kept for their result_ttl (500 s by
    # default); entries that expire only lower it, which is no progress.
    pipe.zcard(f"{PREFIX}:finished:{name}")
    pipe.zcard(f"{PREFIX}:failed:{name}")
    depth, head, started, finished, failed = pipe.execute()
    enqueued_at = None
    if head is not None:
        enqueued_at = enqueued_time(client.hget(f"{PREFIX}:job:{text(head)}", "enqueued_at"))
    return QueueSample(
        now,
        depth=int(depth),
        oldest_age_seconds=age_seconds(now, enqueued_at),
        completed_total=int(finished) + int(failed),
        in_flight=int(started),
    )


PRESET = RedisPreset(
    name="rq", description="Redis: an RQ queue (redis: URL)", default_queue="default", read=read
)
