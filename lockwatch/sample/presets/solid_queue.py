"""Solid Queue (PostgreSQL): read from the target's own database with the query in
solid_queue.sql, which names the schema it was read from and the grants it needs."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="solid_queue",
    description="PostgreSQL: the target's solid_queue_* tables (Solid Queue)",
    sql_file="solid_queue.sql",
)
