"""Queue presets: the libraries our users run, so they name the library and the
queue instead of writing SQL or Redis keys.

A preset resolves at config time into a plain source; the samplers do the rest.
"""

from __future__ import annotations

from importlib import resources

from lockwatch.settings.queues import QueueSource, RedisLayout, RedisQueueSource, SqlQueueSource

PRESETS = {
    "procrastinate": "PostgreSQL: the target's procrastinate_jobs table",
    "rq": "Redis: an RQ queue (redis: URL)",
    "celery": "Redis: a Celery queue on the Redis broker (redis: URL)",
}
NEEDS_REDIS = frozenset({"rq", "celery"})
DEFAULT_QUEUE = {"rq": "default", "celery": "celery"}


def preset_source(
    preset: str, *, queue: str | None, redis_url: str | None, timeout: float
) -> QueueSource:
    """The source a preset stands for. ``queue`` None: procrastinate watches
    every queue, RQ and Celery their default one."""
    if preset == "procrastinate":
        query = (resources.files("lockwatch.sample") / "sql" / "procrastinate_queue.sql").read_text(
            encoding="utf-8"
        )
        return SqlQueueSource(query, params={"queue": queue})
    if preset in NEEDS_REDIS:
        if redis_url is None:
            raise ValueError(f"the {preset} preset needs 'redis' (the broker's URL)")
        layout = RedisLayout.RQ if preset == "rq" else RedisLayout.CELERY
        return RedisQueueSource(
            redis_url, (queue or DEFAULT_QUEUE[preset],), layout=layout, timeout=timeout
        )
    raise ValueError(f"unknown preset {preset!r}")
