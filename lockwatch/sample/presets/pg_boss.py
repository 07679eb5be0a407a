"""pg-boss (Node.js, PostgreSQL) 10, 11 and 12: its ``pgboss`` schema in the
target's own database, one queue or every queue. Its tables changed between
releases (pgboss.archive gone in 11, pgboss.instance new in 12.38), so the
installed schema's version (pgboss.version) picks the query; a version
newer than these is read as the latest with a warning, an older one is
refused with words that say so. Needs SELECT on every table of ``pgboss``."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="pg-boss",
    description="PostgreSQL: the target's pgboss.job table (pg-boss 10 to 12)",
    sql_file="pg_boss.sql",
    version_sql="SELECT max(version) AS version FROM pgboss.version",
    schema_ranges=(
        (21, 24, "pg-boss 10", "pg_boss_10.sql"),
        (25, 43, "pg-boss 11 to 12.35", "pg_boss_11.sql"),
        (44, 46, "pg-boss 12.38", "pg_boss.sql"),
    ),
)
