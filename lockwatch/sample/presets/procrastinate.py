"""procrastinate 3.1 to 3.10 (PostgreSQL): its ``procrastinate_jobs`` table in
the target's own database, one queue or every queue. Needs SELECT on
procrastinate_jobs and procrastinate_events and procrastinate_workers.

procrastinate records no schema version; its migrations are named by the
release that brought them (03.01.00_01_pre_add_heartbeat.sql). The version
read here is the release of the latest migration the preset depends on, told
by the objects it made: 30100 once procrastinate_workers exists (3.1.0, worker
heartbeats), 30000 for an older procrastinate, which the preset cannot read
(it has no heartbeats to judge a worker by), so check-config says so.

A worker is gone once its heartbeat is older than procrastinate's default
stalled_worker_timeout (30 s): the preset's ``stalled_worker_timeout``
parameter, which a test running its workers with a shorter one replaces."""

from __future__ import annotations

from lockwatch.sample.presets.base import SqlPreset

STALLED_WORKER_TIMEOUT = 30.0  # seconds: procrastinate's default (worker.py)

PRESET = SqlPreset(
    name="procrastinate",
    description="PostgreSQL: the target's procrastinate_jobs table (procrastinate 3.1 to 3.10)",
    sql_file="procrastinate.sql",
    params={"stalled_worker_timeout": STALLED_WORKER_TIMEOUT},
    version_sql=(
        "SELECT CASE WHEN to_regclass('procrastinate_workers') IS NOT NULL THEN 30100"
        " WHEN to_regclass('procrastinate_jobs') IS NOT NULL THEN 30000 END AS version"
    ),
    schema_ranges=((30100, 30100, "procrastinate 3.1 to 3.10", "procrastinate.sql"),),
)
