-- River (Go, PostgreSQL): its river_job table, one queue or every queue when
-- %(queue)s is NULL. Waiting: available and due; running: running;
-- completions: finalized rows (completed, cancelled, discarded) until River's
-- cleaner deletes them (after 24 hours by default), which only lowers the
-- count: no progress.
-- Running, one by one (running_jobs, the latest 200 started): each running
-- job with its attempt, the client that took it (the last of attempted_by,
-- which River appends a client id to at every start), and whether its
-- previous attempt was ended by River's rescuer: the rescuer moves a job
-- running past RescueStuckJobsAfter (an hour by default) back to retryable
-- with the error "Stuck job rescued by JobRescuer" ("... by Rescuer" before
-- v0.0.23) for that attempt (internal/maintenance/job_rescuer.go), whether
-- or not its client still runs it.
-- Clients have no heartbeat row: river_client (migration 005) is created but
-- written by no statement of River up to v0.43.0. What tells them alive is
-- river_leader: every started client bids for leadership every 5 seconds
-- (ElectInterval, 1 s of jitter), deleting an expired row first, and the
-- leader renews its row for 15 seconds (internal/leadership/elector.go). So
-- a leader row expired for more than 10 seconds means no client runs at all.
-- Stuck (job_stuck_running): a running job whose client is not the leader
-- now, and either no client runs at all, or its client was restarted: a
-- default client id is the host and the client's start time in UTC
-- (client.go, defaultClientIDWithHost), and a client of the same host
-- started after the job's client last took a job (a pod or process
-- restarted under its old host name). Since: each stuck job's attempted_at.
-- A client id of your own (Config.ID) is judged by the leader row only.
-- Consumers: clients that took or finalized a job of the queue within 15
-- minutes (a client with a free slot takes waiting work within a second),
-- none of its jobs stuck; none when no client runs at all.
-- live_workers: the clients that run a job now or finalized one within 15
-- minutes (for job_rescued_while_running).
-- Each running job also tells its task (River's kind) and what River will do
-- about it: its rescuer moves it back to retryable once it has run past
-- RescueStuckJobsAfter (an hour by default; a setting of the client that
-- lockwatch cannot read). task_history: per kind, its latest successful runs
-- (completed: finalized_at - attempted_at, of the last 2 days, at most 1000).
-- Schema: riverqueue/river v0.43.0 riverdriver/riverpgxv5/migration/main/
-- 002_initial_schema.up.sql (river_job, river_job_state, river_leader).
-- Needs SELECT on river_job and river_leader.
WITH jobs AS (
    SELECT * FROM river_job AS j
    WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
), running AS (
    SELECT j.id, j.kind, j.attempt, j.attempted_at, j.attempted_by,
           j.errors[array_upper(j.errors, 1)] AS last_error
    FROM jobs AS j
    WHERE j.state = 'running' AND j.attempted_at IS NOT NULL
    ORDER BY j.attempted_at DESC LIMIT 200
), took AS (
    SELECT c.kind, EXTRACT(epoch FROM c.finalized_at - c.attempted_at) AS seconds
    FROM jobs AS c
    WHERE c.state = 'completed' AND c.attempted_at IS NOT NULL
      AND c.finalized_at >= now() - interval '2 days'
    ORDER BY c.finalized_at DESC LIMIT 1000
), every_client_gone AS (
    SELECT EXISTS (SELECT 1 FROM river_leader AS l WHERE l.expires_at < now() - interval '10 seconds')
           AND NOT EXISTS (SELECT 1 FROM river_leader AS l WHERE l.expires_at >= now()) AS gone
), taken AS (
    SELECT a.attempted_by[array_upper(a.attempted_by, 1)] AS client, max(a.attempted_at) AS last_taken
    FROM river_job AS a
    WHERE a.attempted_by IS NOT NULL AND a.attempted_at IS NOT NULL
    GROUP BY 1
), clients AS (
    SELECT c.client, m[1] AS host,
           to_timestamp(m[2], 'YYYY_MM_DD"T"HH24_MI_SS_US')::timestamp AT TIME ZONE 'UTC' AS started
    FROM (SELECT client FROM taken UNION SELECT leader_id FROM river_leader) AS c,
         LATERAL regexp_match(c.client, '^(.+)_(\d{4}_\d\d_\d\dT\d\d_\d\d_\d\d_\d{6})$') AS m
), stuck AS (
    SELECT j.id, j.attempted_at, t.client
    FROM jobs AS j
    JOIN taken AS t ON t.client = j.attempted_by[array_upper(j.attempted_by, 1)]
    LEFT JOIN clients AS mine ON mine.client = t.client
    WHERE j.state = 'running'
      AND NOT EXISTS (
          SELECT 1 FROM river_leader AS l WHERE l.leader_id = t.client AND l.expires_at >= now()
      )
      AND ((SELECT gone FROM every_client_gone)
           OR EXISTS (
               SELECT 1 FROM clients AS later
               WHERE later.host = mine.host AND later.client <> mine.client
                 AND later.started > t.last_taken
           ))
)
SELECT count(*) FILTER (WHERE j.state = 'available' AND j.scheduled_at <= now()) AS depth,
       count(*) FILTER (WHERE j.state = 'running') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'cancelled', 'discarded')) AS completed_total,
       EXTRACT(epoch FROM now() - min(j.scheduled_at) FILTER (
           WHERE j.state = 'available' AND j.scheduled_at <= now()
       )) AS oldest_age_seconds,
       (SELECT count(*) FROM stuck) AS stuck_count,
       (SELECT array_agg(s.id::text ORDER BY s.attempted_at, s.id)
        FROM (SELECT * FROM stuck ORDER BY attempted_at, id LIMIT 20) AS s) AS stuck_job_ids,
       (SELECT min(attempted_at) FROM stuck) AS stuck_since,
       CASE WHEN (SELECT gone FROM every_client_gone) THEN 0 ELSE (
           SELECT count(DISTINCT c.attempted_by[array_upper(c.attempted_by, 1)])
           FROM jobs AS c
           WHERE c.attempted_by IS NOT NULL
             AND (c.attempted_at >= now() - interval '15 minutes'
                  OR c.finalized_at >= now() - interval '15 minutes')
             AND NOT EXISTS (
                 SELECT 1 FROM stuck AS s WHERE s.client = c.attempted_by[array_upper(c.attempted_by, 1)]
             )
       ) END AS consumers,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', r.id::text,
            'attempt', r.attempt,
            'started_at', r.attempted_at,
            'workers', COALESCE(to_jsonb(r.attempted_by[array_upper(r.attempted_by, 1):]), '[]'::jsonb),
            'rescued', r.last_error->>'error' IN ('Stuck job rescued by JobRescuer',
                                                   'Stuck job rescued by Rescuer')
                       AND (r.last_error->>'attempt')::int = r.attempt - 1,
            'task', r.kind,
            'deadline', r.attempted_at + interval '1 hour',
            'action', 'River''s rescuer moves it back to retryable after RescueStuckJobsAfter '
                      '(1 hour by default), whether or not its client still runs it'
        ) ORDER BY r.attempted_at DESC), '[]'::jsonb) FROM running AS r) AS running_jobs,
       (SELECT COALESCE(jsonb_object_agg(h.kind, jsonb_build_object(
            'runs', h.runs, 'p50', h.p50, 'p99', h.p99)), '{}'::jsonb)
        FROM (SELECT t.kind, count(*) AS runs,
                     percentile_disc(0.5) WITHIN GROUP (ORDER BY t.seconds) AS p50,
                     percentile_disc(0.99) WITHIN GROUP (ORDER BY t.seconds) AS p99
              FROM took AS t GROUP BY t.kind) AS h) AS task_history,
       (SELECT COALESCE(array_agg(DISTINCT a.attempted_by[array_upper(a.attempted_by, 1)]), '{}')
        FROM river_job AS a
        WHERE a.attempted_by IS NOT NULL
          AND (a.state = 'running'
               OR (a.state IN ('completed', 'cancelled', 'discarded')
                   AND a.finalized_at >= now() - interval '15 minutes'))) AS live_workers
FROM jobs AS j
