-- Oban (Elixir, PostgreSQL): its oban_jobs table in the public prefix, one
-- queue or every queue when %(queue)s is NULL. Oban's timestamps are UTC
-- without a time zone. Waiting: available and due; running: executing;
-- completions: completed, cancelled and discarded rows until the pruner
-- deletes them (which only lowers the count: no progress). Oban records the
-- node and producer per job (attempted_by), no session, so no stuck-running
-- reading.
-- Schema: oban-bg/oban lib/oban/migrations/postgres/v01.ex (oban_jobs,
-- oban_job_state; 'cancelled' from a later version). Needs SELECT on oban_jobs.
SELECT count(*) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= (now() AT TIME ZONE 'UTC')
       ) AS depth,
       count(*) FILTER (WHERE j.state = 'executing') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'cancelled', 'discarded')) AS completed_total,
       EXTRACT(epoch FROM (now() AT TIME ZONE 'UTC') - min(j.scheduled_at) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= (now() AT TIME ZONE 'UTC')
       )) AS oldest_age_seconds
FROM oban_jobs AS j
WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
