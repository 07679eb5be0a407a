-- pg-boss 10 (PostgreSQL): its pgboss.job table (partitioned per queue) and
-- pgboss.archive, one queue or every queue when %(queue)s is NULL.
-- Waiting: created or retry and due (start_after); running: active;
-- completions: finished rows still in job or archive (pg-boss deletes them
-- after its retention, which only lowers the count: no progress).
-- Stuck: active jobs no session of pg-boss (application_name 'pgboss', its
-- default) could have taken: every such session connected after the job
-- started (10 s of slack for a pool that connects as it fetches). pg-boss
-- records no worker per job, so a dead worker is seen once no session of its
-- time is left (a restart, a deploy, the last worker gone); pg-boss itself
-- expires the job only after its expire_in (15 minutes by default).
-- Schema: pg-boss 10.4.2 src/plans.js (create, createQueue, fetchNextJob).
-- Needs SELECT on pgboss.job and pgboss.archive.
WITH jobs AS (
    SELECT * FROM pgboss.job AS j
    WHERE %(queue)s::text IS NULL OR j.name = %(queue)s::text
), stuck AS (
    SELECT j.id, j.started_on FROM jobs AS j
    WHERE j.state = 'active'
      AND NOT EXISTS (
          SELECT 1 FROM pg_catalog.pg_stat_activity AS a
          WHERE a.datname = current_database() AND a.application_name = 'pgboss'
            AND a.backend_start <= j.started_on + interval '10 seconds'
      )
)
SELECT count(*) FILTER (
           WHERE j.state IN ('created', 'retry') AND j.start_after <= now()
       ) AS depth,
       count(*) FILTER (WHERE j.state = 'active') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'failed', 'cancelled'))
         + (SELECT count(*) FROM pgboss.archive AS a
            WHERE %(queue)s::text IS NULL OR a.name = %(queue)s::text) AS completed_total,
       EXTRACT(epoch FROM now() - min(j.start_after) FILTER (
           WHERE j.state IN ('created', 'retry') AND j.start_after <= now()
       )) AS oldest_age_seconds,
       (SELECT count(*) FROM stuck) AS stuck_count,
       (SELECT array_agg(s.id::text ORDER BY s.started_on)
        FROM (SELECT * FROM stuck ORDER BY started_on LIMIT 20) AS s) AS stuck_job_ids,
       (SELECT min(started_on) FROM stuck) AS stuck_since
FROM jobs AS j
