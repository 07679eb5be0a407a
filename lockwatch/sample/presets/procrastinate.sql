-- procrastinate 3 (PostgreSQL): one queue, or every queue when %(queue)s is NULL.
-- Jobs scheduled for later are not pending work yet; a job's age is from when
-- it was deferred (its 'deferred' event) or its schedule, whichever is later.
-- Stuck: jobs 'doing' whose worker is gone, by procrastinate's own rule
-- (queries.sql select_stalled_jobs_by_heartbeat): a worker whose heartbeat
-- (procrastinate_workers.last_heartbeat, every 10 s by default) is older than
-- its default stalled_worker_timeout (30 s), or whose row was pruned (the
-- job's worker_id set NULL). The worker is judged per job, so a dead worker
-- is seen while others live; procrastinate itself retries such jobs only when
-- asked (retry_stalled_jobs). Since: each stuck job's 'started' event.
-- Consumers: the workers with a fresh heartbeat (by the same rule; a worker's
-- row does not say which queues it takes, so any live worker counts).
-- Schema: procrastinate 3.10.0 sql/schema.sql, sql/queries.sql.
-- Needs SELECT on procrastinate_jobs, procrastinate_events and procrastinate_workers.
WITH jobs AS (
    SELECT * FROM procrastinate_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue_name = %(queue)s::text
), stuck AS (
    SELECT j.id,
           (SELECT max(e.at) FROM procrastinate_events AS e
            WHERE e.job_id = j.id AND e.type = 'started') AS started_at
    FROM jobs AS j
    LEFT JOIN procrastinate_workers AS w ON w.id = j.worker_id
    WHERE j.status = 'doing'
      AND (j.worker_id IS NULL OR w.id IS NULL OR w.last_heartbeat < now() - interval '30 seconds')
)
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
       ) AS oldest_age_seconds,
       (SELECT count(*) FROM stuck) AS stuck_count,
       (SELECT array_agg(s.id::text ORDER BY s.started_at)
        FROM (SELECT * FROM stuck ORDER BY started_at LIMIT 20) AS s) AS stuck_job_ids,
       (SELECT min(started_at) FROM stuck) AS stuck_since,
       (SELECT count(*) FROM procrastinate_workers AS w
        WHERE w.last_heartbeat >= now() - interval '30 seconds') AS consumers
FROM jobs AS j
