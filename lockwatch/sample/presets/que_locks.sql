-- Que's advisory locks held on purpose, each with its name: a locker's
-- session (its pid in que_lockers) holds a session lock keyed on the job's id
-- (a bigint) while one of its workers runs the job, and sits idle meanwhile
-- (que-rb/que lib/que/locker.rb and lib/que/poller.rb, pg_try_advisory_lock
-- on que_jobs.id; Que 1.x-2.x). Only jobs not finished nor expired, locked by
-- a registered locker: a lock whose job row is gone is judged as any other.
-- Needs SELECT on que_jobs and que_lockers.
WITH locked AS (
    SELECT DISTINCT (l.classid::bigint << 32) | l.objid::bigint AS key
    FROM pg_catalog.pg_locks AS l
    JOIN que_lockers AS q ON q.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
)
SELECT current_database() AS database, j.id AS key, 'Que job ' || j.id::text AS name,
       'job' AS purpose
FROM que_jobs AS j JOIN locked AS k ON k.key = j.id
WHERE j.finished_at IS NULL AND j.expired_at IS NULL
ORDER BY j.id
LIMIT 5000
