"""Oban (PostgreSQL): read from the target's own database with the query in
oban.sql, which names the schema it was read from and the grants it needs."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="oban",
    description="PostgreSQL: the target's oban_jobs (Oban)",
    sql_file="oban.sql",
)
