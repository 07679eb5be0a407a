"""procrastinate 3 (PostgreSQL): its ``procrastinate_jobs`` table in the target's
own database, one queue or every queue. Needs SELECT on procrastinate_jobs and
procrastinate_events and procrastinate_workers."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="procrastinate",
    description="PostgreSQL: the target's procrastinate_jobs table",
    sql_file="procrastinate.sql",
)
