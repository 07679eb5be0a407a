-- graphile-worker 0.16 (PostgreSQL): its graphile_worker._private_jobs table,
-- one task identifier (the "queue" lockwatch watches) or every task when
-- %(queue)s is NULL. Waiting: due, not locked (or locked longer ago than the
-- 4 hours after which graphile-worker takes it again), attempts left;
-- running: locked within those 4 hours. graphile-worker deletes a job when it
-- succeeds, so there is no count of completions.
-- Schema: graphile-worker 0.16.6 (its migrations, applied by run()). Needs
-- SELECT on graphile_worker._private_jobs and _private_tasks, and, as the
-- two tables have row security on with no policy, a policy on each that
-- lets the monitoring role read it (CREATE POLICY ... FOR SELECT TO ... USING (true)).
SELECT count(*) FILTER (
           WHERE j.run_at <= now() AND j.attempts < j.max_attempts
             AND (j.locked_at IS NULL OR j.locked_at < now() - interval '4 hours')
       ) AS depth,
       count(*) FILTER (WHERE j.locked_at >= now() - interval '4 hours') AS in_flight,
       NULL::bigint AS completed_total,
       EXTRACT(epoch FROM now() - min(j.run_at) FILTER (
           WHERE j.run_at <= now() AND j.attempts < j.max_attempts
             AND (j.locked_at IS NULL OR j.locked_at < now() - interval '4 hours')
       )) AS oldest_age_seconds
FROM graphile_worker._private_jobs AS j
JOIN graphile_worker._private_tasks AS t ON t.id = j.task_id
WHERE %(queue)s::text IS NULL OR t.identifier = %(queue)s::text
