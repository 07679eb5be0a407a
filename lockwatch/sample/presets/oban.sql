-- Oban (Elixir, PostgreSQL): its oban_jobs table in the public prefix, one
-- queue or every queue when %(queue)s is NULL. Oban's timestamps are UTC
-- without a time zone. Waiting: available and due; running: executing;
-- completions: completed, cancelled and discarded rows until the pruner
-- deletes them (which only lowers the count: no progress). Oban records the
-- node and producer per job (attempted_by), no session, so no stuck-running
-- reading.
-- Running, one by one (running_jobs, the latest 200 started): each executing
-- job with its attempt, the node and producer that took it (attempted_by,
-- set at every start), and whether its previous attempt was ended by the
-- Lifeline plugin: Lifeline moves a job executing past rescue_after (an hour
-- by default) back to available by its age alone, alive node or not
-- (lib/oban/plugins/lifeline.ex, Oban 2.x), and records no error, where
-- a failed attempt leaves one in errors with its attempt number; a snooze
-- also moves the attempt on without an error, so a job whose meta counts
-- snoozes is never taken as rescued. live_workers: Oban's producers have no
-- row of their own, so those that run a job now or completed one within 15
-- minutes.
-- Schema: oban-bg/oban lib/oban/migrations/postgres/v01.ex (oban_jobs,
-- oban_job_state; 'cancelled', meta and attempted_by from later versions).
-- Needs SELECT on oban_jobs.
WITH jobs AS (
    SELECT * FROM oban_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
), running AS (
    SELECT j.id, j.attempt, j.attempted_at AT TIME ZONE 'UTC' AS started_at,
           array_to_string(j.attempted_by, '/') AS worker,
           j.attempt > 1
             AND COALESCE(j.meta->>'snoozed', '0') = '0'
             AND NOT EXISTS (
                 SELECT 1 FROM unnest(j.errors) AS e WHERE (e->>'attempt')::int = j.attempt - 1
             ) AS rescued
    FROM jobs AS j
    WHERE j.state = 'executing' AND j.attempted_at IS NOT NULL
    ORDER BY j.attempted_at DESC LIMIT 200
)
SELECT count(*) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= (now() AT TIME ZONE 'UTC')
       ) AS depth,
       count(*) FILTER (WHERE j.state = 'executing') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'cancelled', 'discarded')) AS completed_total,
       EXTRACT(epoch FROM (now() AT TIME ZONE 'UTC') - min(j.scheduled_at) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= (now() AT TIME ZONE 'UTC')
       )) AS oldest_age_seconds,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.attempt,
            'started_at', r.started_at,
            'workers', CASE WHEN r.worker IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(r.worker) END,
            'rescued', r.rescued
        ) ORDER BY r.started_at DESC), '[]'::jsonb) FROM running AS r) AS running_jobs,
       (SELECT COALESCE(array_agg(DISTINCT array_to_string(a.attempted_by, '/')), '{}')
        FROM oban_jobs AS a
        WHERE a.attempted_by IS NOT NULL
          AND (a.state = 'executing'
               OR (a.state = 'completed'
                   AND a.completed_at >= (now() AT TIME ZONE 'UTC') - interval '15 minutes')))
         AS live_workers
FROM jobs AS j
