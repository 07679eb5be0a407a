-- pg-boss 11 to 12.35 (schema versions 25-43; PostgreSQL): its
-- pgboss.job table (partitioned per queue), one queue or every queue when
-- %(queue)s is NULL. As pg_boss_10.sql, less pgboss.archive (gone since
-- schema 25: finished jobs stay in pgboss.job until their retention ends).
-- These releases record no worker per job and no worker liveness: a job is
-- stuck once no pgboss session of its time is left (10 s of slack), and
-- the running jobs' "workers" are the sessions of their time, told as not
-- its workers (workers_told false): which runs it is recorded nowhere.
-- A timeout's record: "job timed out" (plans.js failJobsByTimeout) or the
-- worker's "handler execution exceeded <n>s" (manager.js).
-- Schema: pg-boss 11.1.2 src/plans.js, 12.33.7 dist/plans.js.
-- Needs SELECT on pgboss.job.
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
       count(*) FILTER (WHERE j.state IN ('completed', 'failed', 'cancelled')) AS completed_total,
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
                COALESCE(r.output->>'message', r.output->'value'->>'message')
                    IN ('job timed out', 'job heartbeat timeout')
                OR COALESCE(r.output->>'message', r.output->'value'->>'message')
                    LIKE 'handler execution exceeded %%')
        ) ORDER BY r.started_on DESC), '[]'::jsonb) FROM running AS r) AS running_jobs,
       (SELECT COALESCE(array_agg(s.name ORDER BY s.name), '{}') FROM sessions AS s) AS live_workers
FROM jobs AS j
