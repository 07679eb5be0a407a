-- River (Go, PostgreSQL): its river_job table, one queue or every queue when
-- %(queue)s is NULL. Waiting: available and due; running: running;
-- completions: finalized rows (completed, cancelled, discarded) until River's
-- cleaner deletes them (after 24 hours by default), which only lowers the
-- count: no progress. River records no worker session per job, so no
-- stuck-running reading.
-- Running, one by one (running_jobs, the latest 200 started): each running
-- job with its attempt, the client that took it (the last of attempted_by,
-- which River appends a client id to at every start), and whether its
-- previous attempt was ended by River's rescuer: the rescuer moves a job
-- running past RescueStuckJobsAfter (an hour by default) back to retryable
-- with an error "Stuck job rescued by Rescuer" for that attempt
-- (internal/maintenance/job_rescuer.go), whether or not its client still runs
-- it. live_workers: River clients have no row of their own, so the clients
-- that run a job now or finalized one within 15 minutes.
-- Schema: riverqueue/river riverdriver/riverpgxv5/migration/main/
-- 002_initial_schema.up.sql (river_job, river_job_state). Needs SELECT on river_job.
WITH jobs AS (
    SELECT * FROM river_job AS j
    WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
), running AS (
    SELECT j.id, j.attempt, j.attempted_at, j.attempted_by,
           j.errors[array_upper(j.errors, 1)] AS last_error
    FROM jobs AS j
    WHERE j.state = 'running' AND j.attempted_at IS NOT NULL
    ORDER BY j.attempted_at DESC LIMIT 200
)
SELECT count(*) FILTER (WHERE j.state = 'available' AND j.scheduled_at <= now()) AS depth,
       count(*) FILTER (WHERE j.state = 'running') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'cancelled', 'discarded')) AS completed_total,
       EXTRACT(epoch FROM now() - min(j.scheduled_at) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= now()
       )) AS oldest_age_seconds,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.attempt,
            'started_at', r.attempted_at,
            'workers', COALESCE(to_jsonb(r.attempted_by[array_upper(r.attempted_by, 1):]), '[]'::jsonb),
            'rescued', r.last_error->>'error' = 'Stuck job rescued by Rescuer'
                       AND (r.last_error->>'attempt')::int = r.attempt - 1
        ) ORDER BY r.attempted_at DESC), '[]'::jsonb) FROM running AS r) AS running_jobs,
       (SELECT COALESCE(array_agg(DISTINCT a.attempted_by[array_upper(a.attempted_by, 1)]), '{}')
        FROM river_job AS a
        WHERE a.attempted_by IS NOT NULL
          AND (a.state = 'running'
               OR (a.state IN ('completed', 'cancelled', 'discarded')
                   AND a.finalized_at >= now() - interval '15 minutes'))) AS live_workers
FROM jobs AS j
