-- pg-boss 10 (schema versions 21-24; PostgreSQL): its pgboss.job table (partitioned per queue) and
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
-- Running, one by one (running_jobs, the latest 200 started): each active
-- job with its retry_count, the pgboss sessions that were there when it
-- started (who may be running it), and whether its previous attempt was ended
-- by a timeout rather than by its handler: pg-boss's worker gives up on a
-- handler after expire_in ("handler execution exceeded <n>ms", src/manager.js
-- resolveWithinSeconds, then fail) and its maintenance fails jobs active past
-- expire_in ("job failed by timeout in active state", plans.js
-- failJobsByTimeout); neither stops the handler, so a retry can start while it
-- still runs. live_workers: the pgboss sessions now. Those sessions are told
-- as not its workers (workers_told false): which of them runs the job, and
-- whether its handler still runs, pg-boss 10 records nowhere.
-- Schema: pg-boss 10.4.2 src/plans.js (create, createQueue, fetchNextJob).
-- Needs SELECT on pgboss.job and pgboss.archive.
WITH jobs AS (
    SELECT * FROM pgboss.job AS j
    WHERE %(queue)s::text IS NULL OR j.name = %(queue)s::text
), sessions AS (
    SELECT format('pid %%s (pgboss, connected %%s)', a.pid,
                  to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) AS name,
           a.backend_start
    FROM pg_catalog.pg_stat_activity AS a
    WHERE a.datname = current_database() AND a.application_name = 'pgboss'
), stuck AS (
    SELECT j.id, j.started_on FROM jobs AS j
    WHERE j.state = 'active'
      AND NOT EXISTS (
          SELECT 1 FROM sessions AS s WHERE s.backend_start <= j.started_on + interval '10 seconds'
      )
), running AS (
    SELECT j.id, j.retry_count, j.started_on, j.output FROM jobs AS j
    WHERE j.state = 'active' ORDER BY j.started_on DESC LIMIT 200
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
       (SELECT min(started_on) FROM stuck) AS stuck_since,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.retry_count,
            'started_at', r.started_on,
            'workers', (SELECT COALESCE(jsonb_agg(s.name ORDER BY s.name), '[]'::jsonb)
                        FROM sessions AS s
                        WHERE s.backend_start <= r.started_on + interval '10 seconds'),
            'workers_told', false,
            'rescued', r.retry_count > 0 AND (
                r.output->>'message' = 'job failed by timeout in active state'
                OR r.output->>'message' LIKE 'handler execution exceeded %%ms')
        ) ORDER BY r.started_on DESC), '[]'::jsonb) FROM running AS r) AS running_jobs,
       (SELECT COALESCE(array_agg(s.name ORDER BY s.name), '{}') FROM sessions AS s) AS live_workers
FROM jobs AS j
