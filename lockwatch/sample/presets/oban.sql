-- Oban (Elixir, PostgreSQL): its oban_jobs table in the public prefix, one
-- queue or every queue when %(queue)s is NULL. Oban's timestamps are UTC
-- without a time zone. Waiting: available and due; running: executing;
-- completions: completed, cancelled and discarded rows until the pruner
-- deletes them (which only lowers the count: no progress).
-- Running, one by one (running_jobs, the latest 200 started): each executing
-- job with its attempt, the node and producer that took it (attempted_by,
-- [node, producer uuid], set at every start by the Basic engine's
-- fetch_jobs), and whether its previous attempt was ended by the
-- Lifeline plugin: Lifeline moves a job executing past rescue_after (an hour
-- by default) back to available by its age alone, alive node or not
-- (lib/oban/plugins/lifeline.ex, Oban 2.x), and records no error, where
-- a failed attempt leaves one in errors with its attempt number; a snooze
-- also moves the attempt on without an error, so a job whose meta counts
-- snoozes is never taken as rescued.
-- Producers have no row of their own in Oban (oban_producers is Oban Pro's);
-- a producer's uuid is new at each start, while its node is the host name by
-- default and comes back after a restart (oban-bg/oban#862: a node name
-- reused hides the orphans of the node that was there before). Stuck
-- (job_stuck_running): an executing job whose producer was replaced, a
-- producer of the same node and queue under another uuid that first took a
-- job after the job's producer last took one (judged by the uuid, never the
-- node name); or whose every Oban instance is gone: oban_peers
-- (lib/oban/peers/database.ex) has rows and none of them is renewed within
-- the last 60 seconds (each instance bids every 30, the leader renews every
-- 15). Since: each stuck job's attempted_at.
-- Consumers: producers that took or completed a job of the queue within 15
-- minutes, none of whose jobs is stuck; none when every instance is gone.
-- live_workers: producers that run a job now or completed one within 15
-- minutes (for job_rescued_while_running).
-- Each running job also tells its task (Oban's worker) and what Oban will do
-- about it: the Lifeline plugin, where it runs, moves it back to available
-- once it has executed past rescue_after (60 minutes by default; a setting
-- lockwatch cannot read). task_history: per worker, its latest successful
-- runs (completed: completed_at - attempted_at, of the last 2 days, at most
-- 1000; Oban's pruner keeps completed rows 60 seconds by default, so with it
-- there are few: give such a queue max_job_duration).
-- Schema: oban-bg/oban v2.23.1 lib/oban/migrations/postgres/v01.ex (oban_jobs,
-- oban_job_state; 'cancelled', meta and attempted_by from later versions),
-- v11.ex (oban_peers, Oban 2.11 and later). Needs SELECT on oban_jobs and
-- oban_peers.
WITH jobs AS (
    SELECT * FROM oban_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
), running AS (
    SELECT j.id, j.worker AS task, j.attempt, j.attempted_at AT TIME ZONE 'UTC' AS started_at,
           array_to_string(j.attempted_by, '/') AS worker,
           j.attempt > 1
             AND COALESCE(j.meta->>'snoozed', '0') = '0'
             AND NOT EXISTS (
                 SELECT 1 FROM unnest(j.errors) AS e WHERE (e->>'attempt')::int = j.attempt - 1
             ) AS rescued
    FROM jobs AS j
    WHERE j.state = 'executing' AND j.attempted_at IS NOT NULL
    ORDER BY j.attempted_at DESC LIMIT 200
), took AS (
    SELECT c.worker, EXTRACT(epoch FROM c.completed_at - c.attempted_at) AS seconds
    FROM jobs AS c
    WHERE c.state = 'completed' AND c.attempted_at IS NOT NULL
      AND c.completed_at >= (now() AT TIME ZONE 'UTC') - interval '2 days'
    ORDER BY c.completed_at DESC LIMIT 1000
), every_instance_gone AS (
    SELECT EXISTS (SELECT 1 FROM oban_peers)
           AND NOT EXISTS (
               SELECT 1 FROM oban_peers AS p
               WHERE p.expires_at >= (now() AT TIME ZONE 'UTC') - interval '60 seconds'
           ) AS gone
), producers AS (
    SELECT o.queue, o.attempted_by[1] AS node, o.attempted_by[2] AS producer,
           min(o.attempted_at) AS first_taken, max(o.attempted_at) AS last_taken
    FROM oban_jobs AS o
    WHERE o.attempted_by[2] IS NOT NULL AND o.attempted_at IS NOT NULL
    GROUP BY 1, 2, 3
), stuck AS (
    SELECT j.id, j.attempted_at, j.attempted_by[2] AS producer
    FROM jobs AS j
    LEFT JOIN producers AS mine
           ON (mine.queue, mine.node, mine.producer) = (j.queue, j.attempted_by[1], j.attempted_by[2])
    WHERE j.state = 'executing'
      AND ((SELECT gone FROM every_instance_gone)
           OR EXISTS (
               SELECT 1 FROM producers AS later
               WHERE (later.queue, later.node) = (mine.queue, mine.node)
                 AND later.producer <> mine.producer
                 AND later.first_taken > mine.last_taken
           ))
)
SELECT count(*) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= (now() AT TIME ZONE 'UTC')
       ) AS depth,
       count(*) FILTER (WHERE j.state = 'executing') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'cancelled', 'discarded')) AS completed_total,
       EXTRACT(epoch FROM (now() AT TIME ZONE 'UTC') - min(j.scheduled_at) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= (now() AT TIME ZONE 'UTC')
       )) AS oldest_age_seconds,
       (SELECT count(*) FROM stuck) AS stuck_count,
       (SELECT array_agg(s.id::text ORDER BY s.attempted_at, s.id)
        FROM (SELECT * FROM stuck ORDER BY attempted_at, id LIMIT 20) AS s) AS stuck_job_ids,
       (SELECT min(attempted_at) AT TIME ZONE 'UTC' FROM stuck) AS stuck_since,
       CASE WHEN (SELECT gone FROM every_instance_gone) THEN 0 ELSE (
           SELECT count(DISTINCT c.attempted_by)
           FROM jobs AS c
           WHERE c.attempted_by IS NOT NULL
             AND (c.attempted_at >= (now() AT TIME ZONE 'UTC') - interval '15 minutes'
                  OR c.completed_at >= (now() AT TIME ZONE 'UTC') - interval '15 minutes')
             AND NOT EXISTS (SELECT 1 FROM stuck AS s WHERE s.producer = c.attempted_by[2])
       ) END AS consumers,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.attempt,
            'started_at', r.started_at,
            'workers', CASE WHEN r.worker IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(r.worker) END,
            'rescued', r.rescued,
            'task', r.task,
            'deadline', r.started_at + interval '60 minutes',
            'action', 'Oban''s Lifeline plugin, where it runs, moves it back to available after '
                      'rescue_after (60 minutes by default), whether or not its node still runs it'
        ) ORDER BY r.started_at DESC), '[]'::jsonb) FROM running AS r) AS running_jobs,
       (SELECT COALESCE(jsonb_object_agg(h.worker, jsonb_build_object(
            'runs', h.runs, 'p50', h.p50, 'p99', h.p99)), '{}'::jsonb)
        FROM (SELECT t.worker, count(*) AS runs,
                     percentile_disc(0.5) WITHIN GROUP (ORDER BY t.seconds) AS p50,
                     percentile_disc(0.99) WITHIN GROUP (ORDER BY t.seconds) AS p99
              FROM took AS t GROUP BY t.worker) AS h) AS task_history,
       (SELECT COALESCE(array_agg(DISTINCT array_to_string(a.attempted_by, '/')), '{}')
        FROM oban_jobs AS a
        WHERE a.attempted_by IS NOT NULL
          AND (a.state = 'executing'
               OR (a.state = 'completed'
                   AND a.completed_at >= (now() AT TIME ZONE 'UTC') - interval '15 minutes')))
         AS live_workers
FROM jobs AS j
