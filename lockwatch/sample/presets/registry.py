"""Every queue preset lockwatch knows, one line each: a new library is a module
beside this one and its line here."""

from __future__ import annotations

from lockwatch.sample.presets import (
    celery,
    good_job,
    graphile_worker,
    oban,
    pg_boss,
    procrastinate,
    que,
    river,
    rq,
    solid_queue,
)
from lockwatch.sample.presets.base import Preset, RedisPreset, RedisReader
from lockwatch.settings.queues import QueueSource

KNOWN: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        procrastinate.PRESET,
        pg_boss.PRESET,
        graphile_worker.PRESET,
        river.PRESET,
        oban.PRESET,
        good_job.PRESET,
        solid_queue.PRESET,
        que.PRESET,
        rq.PRESET,
        celery.PRESET,
    )
}
PRESETS = {name: preset.description for name, preset in KNOWN.items()}
NEEDS_REDIS = frozenset(name for name, preset in KNOWN.items() if preset.needs_redis)


def preset_source(
    preset: str, *, queue: str | None, redis_url: str | None, timeout: float
) -> QueueSource:
    """The source a preset stands for. ``queue`` None: a PostgreSQL preset
    watches every queue, a Redis one the library's default queue."""
    if preset not in KNOWN:
        raise ValueError(f"unknown preset {preset!r}")
    return KNOWN[preset].source(queue=queue, redis_url=redis_url, timeout=timeout)


def redis_reader(layout: str) -> RedisReader | None:
    """How a Redis layout named after a preset reads; None for plain keys."""
    preset = KNOWN.get(layout)
    return preset.read if isinstance(preset, RedisPreset) else None
