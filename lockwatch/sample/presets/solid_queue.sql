-- Solid Queue (Ruby, PostgreSQL): its solid_queue_* tables, one queue or
-- every queue when %(queue)s is NULL. Rails timestamps are UTC without a time
-- zone. Waiting: ready executions; running: claimed executions; completions:
-- finished jobs, kept by default (preserve_finished_jobs) until cleared after
-- a day, which only lowers the count (with preservation off there are none
-- to count: use your own SQL).
-- Stuck: claimed executions whose process is gone: no row for it in
-- solid_queue_processes, or no heartbeat for 5 minutes (Solid Queue's
-- process_alive_threshold), so nobody runs the job and no supervisor has
-- released it.
-- Consumers: Worker processes with a heartbeat within those 5 minutes (a
-- process's row does not say which queues it takes: any live worker counts).
-- Schema: rails/solid_queue lib/generators/solid_queue/install/templates/db/
-- queue_schema.rb. Needs SELECT on solid_queue_jobs, _ready_executions,
-- _claimed_executions and _processes.
WITH jobs AS (
    SELECT * FROM solid_queue_jobs AS j
    WHERE %(queue)s::text IS NULL OR j.queue_name = %(queue)s::text
), ready AS (
    SELECT r.* FROM solid_queue_ready_executions AS r
    WHERE %(queue)s::text IS NULL OR r.queue_name = %(queue)s::text
), claimed AS (
    SELECT c.*, p.last_heartbeat_at FROM solid_queue_claimed_executions AS c
    JOIN jobs AS j ON j.id = c.job_id
    LEFT JOIN solid_queue_processes AS p ON p.id = c.process_id
), stuck AS (
    SELECT c.job_id, c.created_at FROM claimed AS c
    WHERE c.last_heartbeat_at IS NULL
       OR c.last_heartbeat_at < (now() AT TIME ZONE 'UTC') - interval '5 minutes'
)
SELECT (SELECT count(*) FROM ready) AS depth,
       (SELECT count(*) FROM claimed) AS in_flight,
       (SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL) AS completed_total,
       (SELECT EXTRACT(epoch FROM (now() AT TIME ZONE 'UTC') - min(created_at)) FROM ready)
         AS oldest_age_seconds,
       (SELECT count(*) FROM stuck) AS stuck_count,
       (SELECT array_agg(s.job_id::text ORDER BY s.created_at)
        FROM (SELECT * FROM stuck ORDER BY created_at LIMIT 20) AS s) AS stuck_job_ids,
       (SELECT min(created_at) AT TIME ZONE 'UTC' FROM stuck) AS stuck_since,
       (SELECT count(*) FROM solid_queue_processes AS p
        WHERE p.kind = 'Worker'
          AND p.last_heartbeat_at >= (now() AT TIME ZONE 'UTC') - interval '5 minutes') AS consumers
