-- good_job's advisory locks held on purpose, each with its name: a worker's
-- session holds a session lock on each job it runs (its session sits idle
-- meanwhile), and every good_job process holds one on its row in
-- good_job_processes for its whole life (GoodJob::Process.register,
-- create_with_advisory_lock; the process is active while it is locked). The
-- key is the first 64 bits of md5(table || '-' || column) as a bigint
-- (bensheldon/good_job app/models/concerns/good_job/advisory_lockable.rb,
-- good_job 3.x-4.x): the job's id (good_job 4; active_job_id in 3) while its
-- row says running (performed, not finished), the process's id. Only keys
-- held now are listed: a lock whose job finished or whose row is gone is
-- judged as any other.
-- Needs SELECT on good_jobs and good_job_processes.
WITH held AS (
    SELECT DISTINCT (l.classid::bigint << 32) | l.objid::bigint AS key
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
), running AS (
    SELECT j.id, j.active_job_id FROM good_jobs AS j
    WHERE j.performed_at IS NOT NULL AND j.finished_at IS NULL
), wanted AS (
    SELECT ('x' || substr(md5('good_jobs-' || r.id::text), 1, 16))::bit(64)::bigint AS key,
           'good_job job ' || r.id::text AS name, 'job' AS purpose
    FROM running AS r
    UNION ALL
    SELECT ('x' || substr(md5('good_jobs-' || r.active_job_id::text), 1, 16))::bit(64)::bigint,
           'good_job job ' || r.id::text, 'job'
    FROM running AS r WHERE r.active_job_id IS NOT NULL
    UNION ALL
    SELECT ('x' || substr(md5('good_job_processes-' || p.id::text), 1, 16))::bit(64)::bigint,
           'good_job process ' || p.id::text, 'liveness'
    FROM good_job_processes AS p
)
SELECT DISTINCT ON (w.key) current_database() AS database, w.key, w.name, w.purpose
FROM wanted AS w JOIN held AS h ON h.key = w.key
ORDER BY w.key
LIMIT 5000
