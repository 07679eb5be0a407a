"""Que (PostgreSQL): read from the target's own database with the query in
que.sql, which names the schema it was read from and the grants it needs.
Its job locks held on purpose are named from its rows by que_locks.sql."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="que",
    description="PostgreSQL: the target's que_jobs (Que 1/2)",
    sql_file="que.sql",
    held_locks_file="que_locks.sql",
)
