"""graphile-worker 0.16 to 0.18 (Node.js, PostgreSQL): its ``graphile_worker``
schema in the target's own database; a queue is a task identifier, or every
task. Its tables took their names in migration 16 (0.16.0) and have kept their
shape since (0.18.0's migrations 19 and 20 change no table), so the installed
schema's version, the latest id in graphile_worker.migrations, is read to say
so of an older or a newer one. No job's worker can be judged alive
(graphile_worker.sql says why); one of several dead is counted from 0.17 on.
Needs SELECT on graphile_worker.migrations,
_private_jobs and _private_tasks, and a SELECT policy on the last two for the
monitoring role: graphile-worker turns row security on for them with no
policy, so without one no job is visible."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="graphile-worker",
    description=(
        "PostgreSQL: the target's graphile_worker jobs, per task (graphile-worker 0.16 to 0.18)"
    ),
    sql_file="graphile_worker.sql",
    version_sql="SELECT max(id) AS version FROM graphile_worker.migrations",
    schema_ranges=((16, 20, "graphile-worker 0.16 to 0.18", "graphile_worker.sql"),),
)
