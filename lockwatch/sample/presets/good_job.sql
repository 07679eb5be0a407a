-- good_job (Ruby, PostgreSQL): its good_jobs table, one queue or every queue
-- when %(queue)s is NULL. Rails timestamps are UTC without a time zone.
-- Waiting: not performed, not finished and due; running: performed, not
-- finished; completions: finished rows until good_job's cleanup deletes them
-- (which only lowers the count: no progress).
-- Stuck: running jobs whose advisory lock is gone. A worker holds a session
-- lock on the job while it runs, its key the first 64 bits of
-- md5('good_jobs-' || column) (lib/good_job/advisory_lockable.rb), the column
-- 'id' in good_job 4 and 'active_job_id' in 3 (lib/good_job/job.rb,
-- advisory_lockable_column): with neither key held in this database, the
-- worker that runs it is gone. good_job 4's opt-in lock_strategy skiplocked
-- (and hybrid) records the process that took the job in locked_by_id
-- instead: such a job is not stuck while that process is active.
-- Active processes, by good_job's own rule (app/models/good_job/process.rb,
-- scope active, v4.19.2): its advisory lock on its row is held (lock_type
-- advisory, and every process of good_job 3, which has no lock_type), or it
-- takes no lock (lock_type NULL) and refreshed its row within 5 minutes
-- (EXPIRED_INTERVAL; a good_job 3 process that died unlocked is counted until
-- then too). Consumers: the active processes (a process's row does not say
-- which queues it takes for sure: any active one counts).
-- locked_by_id and lock_type are read through to_jsonb, so good_job 3's
-- tables, which lack them, read the same.
-- Schema: bensheldon/good_job lib/generators/good_job/templates/install/
-- migrations/create_good_jobs.rb.erb (and good_job_processes, lock_type and
-- locked_by_id from its 4.x update migrations). Needs SELECT on good_jobs and
-- good_job_processes.
WITH jobs AS (
    SELECT * FROM good_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue_name = %(queue)s::text
), held AS (
    SELECT (l.classid::bigint << 32) | l.objid::bigint AS key
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
), active AS (
    SELECT p.id FROM good_job_processes AS p
    WHERE ('x' || substr(md5('good_job_processes-' || p.id::text), 1, 16))::bit(64)::bigint
              IN (SELECT key FROM held)
       OR (to_jsonb(p)->>'lock_type' IS NULL
           AND p.updated_at > (now() AT TIME ZONE 'UTC') - interval '5 minutes')
), stuck AS (
    SELECT j.id, j.performed_at FROM jobs AS j
    WHERE j.performed_at IS NOT NULL AND j.finished_at IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM active AS a WHERE a.id::text = to_jsonb(j)->>'locked_by_id'
      )
      AND NOT EXISTS (
          SELECT 1 FROM held AS h
          WHERE h.key IN (
              ('x' || substr(md5('good_jobs-' || j.id::text), 1, 16))::bit(64)::bigint,
              ('x' || substr(md5('good_jobs-' || j.active_job_id::text), 1, 16))::bit(64)::bigint
          )
      )
)
SELECT count(*) FILTER (
           WHERE j.performed_at IS NULL AND j.finished_at IS NULL
             AND (j.scheduled_at IS NULL OR j.scheduled_at <= (now() AT TIME ZONE 'UTC'))
       ) AS depth,
       count(*) FILTER (WHERE j.performed_at IS NOT NULL AND j.finished_at IS NULL) AS in_flight,
       count(*) FILTER (WHERE j.finished_at IS NOT NULL) AS completed_total,
       EXTRACT(epoch FROM (now() AT TIME ZONE 'UTC') - min(COALESCE(j.scheduled_at, j.created_at)) FILTER (
           WHERE j.performed_at IS NULL AND j.finished_at IS NULL
             AND (j.scheduled_at IS NULL OR j.scheduled_at <= (now() AT TIME ZONE 'UTC'))
       )) AS oldest_age_seconds,
       (SELECT count(*) FROM stuck) AS stuck_count,
       (SELECT array_agg(s.id::text ORDER BY s.performed_at)
        FROM (SELECT * FROM stuck ORDER BY performed_at LIMIT 20) AS s) AS stuck_job_ids,
       (SELECT min(performed_at) AT TIME ZONE 'UTC' FROM stuck) AS stuck_since,
       (SELECT count(*) FROM active) AS consumers
FROM jobs AS j
