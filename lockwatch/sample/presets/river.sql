-- River (Go, PostgreSQL): its river_job table, one queue or every queue when
-- %(queue)s is NULL. Waiting: available and due; running: running;
-- completions: finalized rows (completed, cancelled, discarded) until River's
-- cleaner deletes them (after 24 hours by default), which only lowers the
-- count: no progress. River records no worker session per job (attempted_by
-- holds client ids), so no stuck-running reading.
-- Schema: riverqueue/river riverdriver/riverpgxv5/migration/main/
-- 002_initial_schema.up.sql (river_job, river_job_state). Needs SELECT on river_job.
SELECT count(*) FILTER (WHERE j.state = 'available' AND j.scheduled_at <= now()) AS depth,
       count(*) FILTER (WHERE j.state = 'running') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'cancelled', 'discarded')) AS completed_total,
       EXTRACT(epoch FROM now() - min(j.scheduled_at) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= now()
       )) AS oldest_age_seconds
FROM river_job AS j
WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
