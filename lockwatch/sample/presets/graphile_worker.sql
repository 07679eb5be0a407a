-- graphile-worker 0.16 to 0.18 (PostgreSQL): its graphile_worker._private_jobs table,
-- one task identifier (the "queue" lockwatch watches) or every task when
-- %(queue)s is NULL. Waiting: due, not locked (or locked longer ago than the
-- 4 hours after which graphile-worker takes it again), attempts left;
-- running: locked within those 4 hours. graphile-worker deletes a job when it
-- succeeds, so there is no count of completions.
-- Stuck: jobs locked within the 4 hours that no live worker could have
-- locked. Every graphile-worker process keeps one session for its whole life
-- that ran LISTEN "jobs:insert" (src/main.ts) and nothing since; a job locked
-- before every such session connected belongs to a worker that is gone. The
-- slack, 2 s, is for a worker that takes its first job while its listener
-- connects (runTaskList asks for the listener's connection after starting
-- its workers: milliseconds apart); a replacement worker started later than
-- that does not hide its predecessor's job, as 10 s of slack did.
-- One of several workers killed while the others live: graphile-worker ties
-- no job to a connection. locked_by is a random id chosen in the process
-- ("worker-<hex>" per worker in 0.16.6, dist/worker.js; "pool-<hex>" per
-- run() in 0.17 and later, 0.18.0 dist/main.js), sent as a bind parameter
-- (dist/sql/getJob.js, getJobs.js: locked_by = $1), set in no
-- application_name and no LISTEN channel; its tables keep no worker or
-- heartbeat (migrations 1-20). So no job's worker can be judged alive.
-- What can be told from 0.17 on: each run() holds one worker pool and one
-- listening session, so pools holding jobs beyond the listening sessions are
-- gone (not one-time "otpool-" runs, which listen to nothing). Which they are
-- is not told: the stuck count adds, for that many pools, the fewest of this
-- queue's jobs any of them holds (a lower bound), with no ids. A dead pool
-- is missed while an idle live process's listener makes up for it, and on
-- 0.16 (a process runs several worker ids) nothing is counted: each running
-- job says its liveness is not told, and queue_job_too_long (max_job_duration)
-- tells the job its dead worker left.
-- Consumers: those listening sessions, one per live worker process.
-- Running: the jobs locked within the 4 hours, by task and worker (locked_by),
-- each freed by graphile-worker 4 hours after it was locked. No task history:
-- graphile-worker deletes a job when it succeeds (give max_job_duration).
-- Schema: graphile-worker 0.16.6 (its migrations, applied by run()), the
-- same tables in 0.18.0 (migrations 19-20). Needs SELECT on
-- graphile_worker._private_jobs, _private_tasks and migrations (the installed
-- schema's version, read before this), and, as the
-- two tables have row security on with no policy, a policy on each that
-- lets the monitoring role read it (CREATE POLICY ... FOR SELECT TO ... USING (true)).
WITH jobs AS (
    SELECT j.*, t.identifier FROM graphile_worker._private_jobs AS j
    JOIN graphile_worker._private_tasks AS t ON t.id = j.task_id
    WHERE %(queue)s::text IS NULL OR t.identifier = %(queue)s::text
), running AS (
    SELECT j.id, j.identifier, j.attempts, j.locked_at, j.locked_by FROM jobs AS j
    WHERE j.locked_at >= now() - interval '4 hours' ORDER BY j.locked_at DESC LIMIT 200
), stuck AS (
    SELECT j.id, j.locked_at FROM jobs AS j
    WHERE j.locked_at >= now() - interval '4 hours'
      AND NOT EXISTS (
          SELECT 1 FROM pg_catalog.pg_stat_activity AS a
          WHERE a.datname = current_database()
            AND a.query LIKE 'LISTEN "jobs:insert"%%'
            AND a.backend_start <= j.locked_at + interval '2 seconds'
      )
), listeners AS (
    SELECT count(*) AS n FROM pg_catalog.pg_stat_activity AS a
    WHERE a.datname = current_database() AND a.query LIKE 'LISTEN "jobs:insert"%%'
), pools AS (
    -- Every pool holding a job of any task (and none told stuck above), with
    -- how many of this queue's it holds.
    SELECT j.locked_by, count(*) FILTER (
               WHERE %(queue)s::text IS NULL OR t.identifier = %(queue)s::text) AS jobs
    FROM graphile_worker._private_jobs AS j
    JOIN graphile_worker._private_tasks AS t ON t.id = j.task_id
    WHERE j.locked_at >= now() - interval '4 hours' AND j.locked_by LIKE 'pool-%%'
      AND j.id NOT IN (SELECT id FROM stuck)
    GROUP BY j.locked_by
), gone AS (
    SELECT p.jobs
    FROM (SELECT jobs, row_number() OVER (ORDER BY jobs, locked_by) AS n FROM pools) AS p
    WHERE p.n <= (SELECT count(*) FROM pools) - (SELECT n FROM listeners)
)
SELECT count(*) FILTER (
           WHERE j.run_at <= now() AND j.attempts < j.max_attempts
             AND (j.locked_at IS NULL OR j.locked_at < now() - interval '4 hours')
       ) AS depth,
       count(*) FILTER (WHERE j.locked_at >= now() - interval '4 hours') AS in_flight,
       NULL::bigint AS completed_total,
       EXTRACT(epoch FROM now() - min(j.run_at) FILTER (
           WHERE j.run_at <= now() AND j.attempts < j.max_attempts
             AND (j.locked_at IS NULL OR j.locked_at < now() - interval '4 hours')
       )) AS oldest_age_seconds,
       (SELECT count(*) FROM stuck) + (SELECT COALESCE(sum(jobs), 0) FROM gone) AS stuck_count,
       (SELECT array_agg(s.id::text ORDER BY s.locked_at)
        FROM (SELECT * FROM stuck ORDER BY locked_at LIMIT 20) AS s) AS stuck_job_ids,
       (SELECT min(locked_at) FROM stuck) AS stuck_since,
       (SELECT n FROM listeners) AS consumers,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.attempts,
            'started_at', r.locked_at,
            'workers', jsonb_build_array(r.locked_by),
            'rescued', false,
            'liveness_told', false,
            'task', r.identifier,
            'deadline', r.locked_at + interval '4 hours',
            'action', 'graphile-worker frees its lock 4 hours after it was taken and runs it again'
        ) ORDER BY r.locked_at DESC), '[]'::jsonb) FROM running AS r) AS running_jobs
FROM jobs AS j
