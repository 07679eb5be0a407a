"""River (PostgreSQL): read from the target's own database with the query in
river.sql, which names the schema it was read from and the grants it needs."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="river",
    description="PostgreSQL: the target's river_job (River)",
    sql_file="river.sql",
)
