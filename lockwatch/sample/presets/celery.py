"""Celery on the Redis broker (kombu): a queue is the list named after it, and
its priorities 3, 6 and 9 are lists of their own, named after the queue and a
separator (priority 0 is the queue itself)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from lockwatch.model.queues import QueueSample
from lockwatch.sample.presets.base import RedisPreset

if TYPE_CHECKING:
    import redis

PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)


def read(client: redis.Redis, name: str, now: datetime) -> QueueSample:
    pipe = client.pipeline(transaction=False)
    pipe.llen(name)
    for step in PRIORITY_STEPS:
        pipe.llen(f"{name}{PRIORITY_SEPARATOR}{step}")
    return QueueSample(now, sum(int(n) for n in pipe.execute()))


PRESET = RedisPreset(
    name="celery",
    description="Redis: a Celery queue on the Redis broker (redis: URL)",
    default_queue="celery",
    read=read,
)
