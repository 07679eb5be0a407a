"""graphile-worker 0.16 (Node.js, PostgreSQL): its ``graphile_worker`` schema
in the target's own database; a queue is a task identifier, or every task.
Needs SELECT on graphile_worker._private_jobs and _private_tasks, and a
SELECT policy on both for the monitoring role: graphile-worker turns row
security on for them with no policy, so without one no job is visible."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="graphile-worker",
    description="PostgreSQL: the target's graphile_worker jobs, per task (graphile-worker 0.16)",
    sql_file="graphile_worker.sql",
)
