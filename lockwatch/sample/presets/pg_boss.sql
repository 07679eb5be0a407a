-- pg-boss 12.38 and later (schema versions 44-46; PostgreSQL): its pgboss.job
-- table and pgboss.instance, one queue or every queue when %(queue)s is NULL.
-- Each PgBoss object registers an instance row (plans.js createTableInstance):
-- its own application_name ('pgboss:<id>'), a heartbeat every
-- heartbeat_seconds, stopped_on when stopped, and per work() call the queue
-- it works and the jobs it has in hand (workers[].queue, .active).
-- Liveness is judged per instance, never per "any pg-boss session": an
-- instance is alive while not stopped, within pg-boss's own three beats
-- (INSTANCE_QUIET_BEATS), and either beating on time or connected under its
-- name (a killed process's sessions end at once, so it is dead as soon as it
-- misses a beat; a live worker that polls keeps a session between beats).
-- A job's workers are the instances that work its queue and lived when it
-- started, and those not yet beaten since registering (their work() calls are
-- not written yet); a send-only producer works no queue, so once it has
-- beaten it never keeps a dead worker's job alive. Stuck: an active job whose workers are all dead (ids
-- known), plus, per dead instance that crashed (never stopped), the jobs of
-- the queue it had in hand at its last beat that are still active and
-- started while it lived (counted: which of them was its own is not told).
-- Consumers: the live instances working the queue (a producer works none).
-- Each running job's workers are its takers less those that have beaten since
-- it started handling no batch of its queue (they did not take it); which
-- of several took it pg-boss does not record. A worker handles a batch from
-- its fetch to the end of the batch (workers[].lastFetchedOn after
-- .lastJobEndedOn), a handler that outran its expiry included: pg-boss
-- fails its jobs and empties the worker's count but holds the worker until
-- the handler returns (manager.js #awaitHandlerOverrun). A batch is named by
-- its work() call and fetch time, the same while the same handler runs:
-- each running job's "handling" (its workers' batches at a beat after it
-- started) and busy_workers (every live worker's batch now) let
-- job_rescued_while_running follow a timed-out handler to its end.
-- Each running job's task is its name, its sessions those of its live workers,
-- and pg-boss expires it expire_seconds after its start; task_history: per
-- name, the latest successful runs (queue_job_too_long learns from them).
-- Waiting, running and completions as pg_boss_11.sql.
-- Schema: pg-boss 12.38.0 dist/plans.js (createTableInstance, createTableJob,
-- fetchNextJob, INSTANCE_QUIET_BEATS), dist/registrar.js (#workers) and
-- dist/worker.js (run, toWipData). Needs SELECT on pgboss.job and
-- pgboss.instance.
WITH jobs AS (
    SELECT * FROM pgboss.job AS j
    WHERE %(queue)s::text IS NULL OR j.name = %(queue)s::text
), instances AS (
    SELECT i.id, i.started_on, i.heartbeat_on, i.stopped_on, i.workers, i.application_name,
           i.heartbeat_seconds * interval '1 second' AS beat,
           format('instance %%s (pid %%s on %%s)', left(i.id::text, 8), i.pid, i.host) AS name,
           i.stopped_on IS NULL
             AND i.heartbeat_on >= now() - 3 * i.heartbeat_seconds * interval '1 second'
             AND (i.heartbeat_on >= now() - (i.heartbeat_seconds + 5) * interval '1 second'
                  OR EXISTS (
                      SELECT 1 FROM pg_catalog.pg_stat_activity AS a
                      WHERE a.datname = current_database()
                        AND a.application_name = i.application_name)) AS alive
    FROM pgboss.instance AS i
), takers AS (
    -- Who may have taken each active job: instances working its queue, alive at
    -- its start. An instance that has not beaten since it registered has
    -- workers '[]' whatever its work() calls (the list is written by a beat),
    -- so it may have taken any job: a worker killed before its first beat
    -- (a crash on its first job) leaves that job's stuck.
    -- Beaten since it started: a beat written a second after its start (a
    -- beat's workers are read in the process before its statement runs).
    SELECT j.id AS job_id, j.name AS queue, i.id AS instance_id, i.name, i.alive,
           i.application_name, i.heartbeat_on >= j.started_on + interval '1 second' AS beaten
    FROM jobs AS j JOIN instances AS i
      ON (i.workers @> jsonb_build_array(jsonb_build_object('queue', j.name))
          OR i.heartbeat_on = i.started_on)
     AND i.started_on <= j.started_on
     AND j.started_on <= i.heartbeat_on + i.beat + interval '5 seconds'
    WHERE j.state = 'active'
), batches AS (
    -- The batch each live worker handles at its instance's last beat.
    SELECT i.id AS instance_id, i.name, w->>'queue' AS queue,
           format('%%s fetched %%s', w->>'id', w->>'lastFetchedOn') AS batch
    FROM instances AS i CROSS JOIN LATERAL jsonb_array_elements(i.workers) AS w
    WHERE i.alive AND w->>'lastFetchedOn' IS NOT NULL
      AND (w->>'lastJobEndedOn' IS NULL OR w->>'lastFetchedOn' > w->>'lastJobEndedOn')
      AND (%(queue)s::text IS NULL OR w->>'queue' = %(queue)s::text)
), candidates AS (
    -- The takers that may run each job now.
    SELECT t.* FROM takers AS t
    WHERE NOT t.beaten
       OR EXISTS (SELECT 1 FROM batches AS b
                  WHERE b.instance_id = t.instance_id AND b.queue = t.queue)
), orphaned AS (
    SELECT j.id, j.started_on FROM jobs AS j
    WHERE j.state = 'active'
      AND EXISTS (SELECT 1 FROM takers AS t WHERE t.job_id = j.id)
      AND NOT EXISTS (SELECT 1 FROM takers AS t WHERE t.job_id = j.id AND t.alive)
), crashed AS (
    -- Per crashed instance and queue: jobs in hand at its last beat, still active.
    SELECT LEAST(
               COALESCE((SELECT sum((w->>'active')::int) FROM jsonb_array_elements(i.workers) AS w
                         WHERE w->>'queue' = q.name), 0),
               count(j.id)) AS held,
           min(j.started_on) AS since
    FROM instances AS i
    CROSS JOIN LATERAL (SELECT DISTINCT w->>'queue' AS name
                        FROM jsonb_array_elements(i.workers) AS w) AS q
    LEFT JOIN jobs AS j
      ON j.name = q.name AND j.state = 'active'
     AND j.started_on BETWEEN i.started_on AND i.heartbeat_on
     AND j.id NOT IN (SELECT id FROM orphaned)
    WHERE NOT i.alive AND i.stopped_on IS NULL
      AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
    GROUP BY i.id, i.workers, q.name
), running AS (
    SELECT j.id, j.name, j.retry_count, j.started_on, j.output, j.expire_seconds FROM jobs AS j
    WHERE j.state = 'active' ORDER BY j.started_on DESC LIMIT 200
), took AS (
    -- The latest successful runs (of the last 2 days, at most 1000) per job name.
    SELECT c.name, EXTRACT(epoch FROM c.completed_on - c.started_on) AS seconds
    FROM jobs AS c
    WHERE c.state = 'completed' AND c.started_on IS NOT NULL
      AND c.completed_on >= now() - interval '2 days'
    ORDER BY c.completed_on DESC LIMIT 1000
)
SELECT count(*) FILTER (
           WHERE j.state IN ('created', 'retry') AND j.start_after <= now()
       ) AS depth,
       count(*) FILTER (WHERE j.state = 'active') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'failed', 'cancelled')) AS completed_total,
       EXTRACT(epoch FROM now() - min(j.start_after) FILTER (
           WHERE j.state IN ('created', 'retry') AND j.start_after <= now()
       )) AS oldest_age_seconds,
       (SELECT count(*) FROM orphaned) + (SELECT COALESCE(sum(held), 0) FROM crashed) AS stuck_count,
       (SELECT array_agg(s.id::text ORDER BY s.started_on)
        FROM (SELECT * FROM orphaned ORDER BY started_on LIMIT 20) AS s) AS stuck_job_ids,
       LEAST((SELECT min(started_on) FROM orphaned),
             (SELECT min(since) FROM crashed WHERE held > 0)) AS stuck_since,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.retry_count,
            'started_at', r.started_on,
            'workers', (SELECT COALESCE(jsonb_agg(c.name ORDER BY c.name), '[]'::jsonb)
                        FROM candidates AS c WHERE c.job_id = r.id),
            'handling', (SELECT COALESCE(jsonb_agg(jsonb_build_array(c.name, b.batch)
                                                   ORDER BY c.name, b.batch), '[]'::jsonb)
                         FROM candidates AS c JOIN batches AS b
                           ON b.instance_id = c.instance_id AND b.queue = c.queue
                         WHERE c.job_id = r.id AND c.beaten),
            'task', r.name,
            'sessions', (SELECT COALESCE(jsonb_agg(a.pid ORDER BY a.pid), '[]'::jsonb)
                         FROM pg_catalog.pg_stat_activity AS a
                         WHERE a.datname = current_database()
                           AND a.application_name IN (SELECT c.application_name
                                                      FROM candidates AS c
                                                      WHERE c.job_id = r.id AND c.alive)),
            'deadline', r.started_on + r.expire_seconds * interval '1 second',
            'action', format('pg-boss expires it (expire_seconds %%s) and retries or fails it',
                             r.expire_seconds),
            'rescued', r.retry_count > 0 AND (
                COALESCE(r.output->>'message', r.output->'value'->>'message')
                    IN ('job timed out', 'job heartbeat timeout')
                OR COALESCE(r.output->>'message', r.output->'value'->>'message')
                    LIKE 'handler execution exceeded %%')
        ) ORDER BY r.started_on DESC), '[]'::jsonb) FROM running AS r) AS running_jobs,
       (SELECT COALESCE(array_agg(i.name ORDER BY i.name), '{}') FROM instances AS i
        WHERE i.alive AND jsonb_array_length(i.workers) > 0) AS live_workers,
       (SELECT COALESCE(jsonb_agg(jsonb_build_array(b.name, b.batch) ORDER BY b.name, b.batch),
                        '[]'::jsonb)
        FROM batches AS b) AS busy_workers,
       (SELECT COALESCE(jsonb_object_agg(h.name, jsonb_build_object(
            'runs', h.runs, 'p50', h.p50, 'p99', h.p99)), '{}'::jsonb)
        FROM (SELECT t.name, count(*) AS runs,
                     percentile_disc(0.5) WITHIN GROUP (ORDER BY t.seconds) AS p50,
                     percentile_disc(0.99) WITHIN GROUP (ORDER BY t.seconds) AS p99
              FROM took AS t GROUP BY t.name) AS h) AS task_history,
       (SELECT count(*) FROM instances AS i
        WHERE i.alive AND EXISTS (
            SELECT 1 FROM jsonb_array_elements(i.workers) AS w
            WHERE %(queue)s::text IS NULL OR w->>'queue' = %(queue)s::text)) AS consumers
FROM jobs AS j
