"""pg-boss 10 (Node.js, PostgreSQL): its ``pgboss`` schema in the target's own
database, one queue or every queue. Needs SELECT on pgboss.job and
pgboss.archive."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="pg-boss",
    description="PostgreSQL: the target's pgboss.job table (pg-boss 10)",
    sql_file="pg_boss.sql",
)
