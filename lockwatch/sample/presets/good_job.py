"""good_job (PostgreSQL): read from the target's own database with the query in
good_job.sql, which names the schema it was read from and the grants it needs.
Its locks held on purpose (each running job's, each process's) are named from
its rows by good_job_locks.sql, which needs SELECT on good_job_processes too."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

PRESET = SqlPreset(
    name="good_job",
    description="PostgreSQL: the target's good_jobs (good_job 3/4)",
    sql_file="good_job.sql",
    held_locks_file="good_job_locks.sql",
)
