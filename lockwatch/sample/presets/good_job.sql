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
-- worker that runs it is gone.
-- Schema: bensheldon/good_job lib/generators/good_job/templates/install/
-- migrations/create_good_jobs.rb.erb. Needs SELECT on good_jobs.
WITH jobs AS (
    SELECT * FROM good_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue_name = %(queue)s::text
), held AS (
    SELECT (l.classid::bigint << 32) | l.objid::bigint AS key
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
), stuck AS (
    SELECT j.id, j.performed_at FROM jobs AS j
    WHERE j.performed_at IS NOT NULL AND j.finished_at IS NULL
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
       (SELECT min(performed_at) AT TIME ZONE 'UTC' FROM stuck) AS stuck_since
FROM jobs AS j
