-- pg-boss 10 (PostgreSQL): its pgboss.job table (partitioned per queue) and
-- pgboss.archive, one queue or every queue when %(queue)s is NULL.
-- Waiting: created or retry and due (start_after); running: active;
-- completions: finished rows still in job or archive (pg-boss deletes them
-- after its retention, which only lowers the count: no progress).
-- Schema: pg-boss 10.4.2 src/plans.js (create, createQueue). Needs SELECT on
-- pgboss.job and pgboss.archive.
SELECT count(*) FILTER (
           WHERE j.state IN ('created', 'retry') AND j.start_after <= now()
       ) AS depth,
       count(*) FILTER (WHERE j.state = 'active') AS in_flight,
       count(*) FILTER (WHERE j.state IN ('completed', 'failed', 'cancelled'))
         + (SELECT count(*) FROM pgboss.archive AS a
            WHERE %(queue)s::text IS NULL OR a.name = %(queue)s::text) AS completed_total,
       EXTRACT(epoch FROM now() - min(j.start_after) FILTER (
           WHERE j.state IN ('created', 'retry') AND j.start_after <= now()
       )) AS oldest_age_seconds
FROM pgboss.job AS j
WHERE %(queue)s::text IS NULL OR j.name = %(queue)s::text
