-- procrastinate (PostgreSQL): one queue, or every queue when %(queue)s is NULL.
-- Jobs scheduled for later are not pending work yet; a job's age is from when
-- it was deferred (its 'deferred' event) or its schedule, whichever is later.
-- Needs SELECT on procrastinate_jobs and procrastinate_events.
SELECT count(*) FILTER (
           WHERE j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now())
       ) AS depth,
       count(*) FILTER (WHERE j.status = 'doing') AS in_flight,
       count(*) FILTER (
           WHERE j.status IN ('succeeded', 'failed', 'cancelled', 'aborted')
       ) AS completed_total,
       (SELECT EXTRACT(epoch FROM now() - min(GREATEST(e.at, p.scheduled_at)))
        FROM procrastinate_jobs AS p
        JOIN procrastinate_events AS e ON e.job_id = p.id AND e.type = 'deferred'
        WHERE p.status = 'todo'
          AND (p.scheduled_at IS NULL OR p.scheduled_at <= now())
          AND (%(queue)s::text IS NULL OR p.queue_name = %(queue)s::text)
       ) AS oldest_age_seconds
FROM procrastinate_jobs AS j
WHERE %(queue)s::text IS NULL OR j.queue_name = %(queue)s::text
