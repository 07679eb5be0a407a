-- procrastinate 3 (PostgreSQL): one queue, or every queue when %(queue)s is NULL.
-- Jobs scheduled for later are not pending work yet; a job's age is from when
-- it was deferred (its 'deferred' event) or its schedule, whichever is later.
-- Stuck: jobs 'doing' whose worker is gone, by procrastinate's own rule
-- (queries.sql select_stalled_jobs_by_heartbeat): a worker whose heartbeat
-- (procrastinate_workers.last_heartbeat, every 10 s by default) is older than
-- its stalled_worker_timeout (the preset's parameter: procrastinate's default,
-- 30 s), or whose row was pruned (the
-- job's worker_id set NULL). The worker is judged per job, so a dead worker
-- is seen while others live; procrastinate itself retries such jobs only when
-- asked (retry_stalled_jobs). Since: each stuck job's 'started' event.
-- Consumers: the workers with a fresh heartbeat (by the same rule; a worker's
-- row does not say which queues it takes, so any live worker counts).
-- Running: the jobs 'doing', by task and worker, since their 'started' event
-- (procrastinate never ends one by itself); task_history: per task, its
-- latest successful runs, from their 'started' and 'succeeded' events.
-- Schema: procrastinate 3.10.0 sql/schema.sql, sql/queries.sql.
-- Needs SELECT on procrastinate_jobs, procrastinate_events and procrastinate_workers.
WITH jobs AS (
    SELECT * FROM procrastinate_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue_name = %(queue)s::text
), running AS (
    SELECT j.id, j.task_name, j.attempts, j.worker_id,
           (SELECT max(e.at) FROM procrastinate_events AS e
            WHERE e.job_id = j.id AND e.type = 'started') AS started_at
    FROM jobs AS j WHERE j.status = 'doing'
    ORDER BY j.id DESC LIMIT 200
), took AS (
    -- The latest successful runs (of the last 2 days, at most 1000) per task.
    SELECT j.task_name,
           EXTRACT(epoch FROM done.at - (SELECT max(e.at) FROM procrastinate_events AS e
                                        WHERE e.job_id = j.id AND e.type = 'started')) AS seconds
    FROM procrastinate_events AS done
    JOIN jobs AS j ON j.id = done.job_id
    WHERE done.type = 'succeeded' AND done.at >= now() - interval '2 days'
    ORDER BY done.at DESC LIMIT 1000
), stuck AS (
    SELECT j.id,
           (SELECT max(e.at) FROM procrastinate_events AS e
            WHERE e.job_id = j.id AND e.type = 'started') AS started_at
    FROM jobs AS j
    LEFT JOIN procrastinate_workers AS w ON w.id = j.worker_id
    WHERE j.status = 'doing'
      AND (j.worker_id IS NULL OR w.id IS NULL OR w.last_heartbeat < now() - %(stalled_worker_timeout)s * interval '1 second')
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
        WHERE w.last_heartbeat >= now() - %(stalled_worker_timeout)s * interval '1 second') AS consumers,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.attempts,
            'started_at', r.started_at,
            'workers', CASE WHEN r.worker_id IS NULL THEN '[]'::jsonb
                            ELSE jsonb_build_array(format('worker %%s', r.worker_id)) END,
            'rescued', false,
            'task', r.task_name,
            'action', 'procrastinate never ends it by itself'
        ) ORDER BY r.started_at DESC), '[]'::jsonb)
        FROM running AS r WHERE r.started_at IS NOT NULL) AS running_jobs,
       (SELECT COALESCE(jsonb_object_agg(h.task_name, jsonb_build_object(
            'runs', h.runs, 'p50', h.p50, 'p99', h.p99)), '{}'::jsonb)
        FROM (SELECT t.task_name, count(*) AS runs,
                     percentile_disc(0.5) WITHIN GROUP (ORDER BY t.seconds) AS p50,
                     percentile_disc(0.99) WITHIN GROUP (ORDER BY t.seconds) AS p99
              FROM took AS t WHERE t.seconds IS NOT NULL GROUP BY t.task_name) AS h) AS task_history
FROM jobs AS j
