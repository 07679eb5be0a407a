-- Que 1.x/2.x (Ruby, PostgreSQL): its que_jobs table, one queue or every
-- queue when %(queue)s is NULL. Que marks no job running: a locker's session
-- (its pid in que_lockers) holds a session advisory lock on the job's id
-- while a worker runs it, so running is read from pg_locks. Waiting: not
-- finished, not expired, due and not locked. Que deletes a job when it
-- succeeds (unless the job calls finish), so there is no count of completions.
-- Consumers: lockers working the queue whose session is still connected (a
-- killed process leaves its row until the next locker starts).
-- Schema: que-rb/que lib/que/migrations/4/up.sql (que_jobs, que_lockers).
-- Needs SELECT on que_jobs and que_lockers.
WITH jobs AS (
    SELECT * FROM que_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue = %(queue)s::text
), locked AS (
    SELECT (l.classid::bigint << 32) | l.objid::bigint AS id
    FROM pg_catalog.pg_locks AS l
    JOIN que_lockers AS q ON q.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
)
SELECT count(*) FILTER (
           WHERE j.finished_at IS NULL AND j.expired_at IS NULL AND j.run_at <= now()
             AND j.id NOT IN (SELECT id FROM locked)
       ) AS depth,
       count(*) FILTER (WHERE j.id IN (SELECT id FROM locked)) AS in_flight,
       NULL::bigint AS completed_total,
       EXTRACT(epoch FROM now() - min(j.run_at) FILTER (
           WHERE j.finished_at IS NULL AND j.expired_at IS NULL AND j.run_at <= now()
             AND j.id NOT IN (SELECT id FROM locked)
       )) AS oldest_age_seconds,
       (SELECT count(*) FROM que_lockers AS q
        WHERE (%(queue)s::text IS NULL OR %(queue)s::text = ANY (q.queues))
          AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = q.pid))
         AS consumers
FROM jobs AS j
