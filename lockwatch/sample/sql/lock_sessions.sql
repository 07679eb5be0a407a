-- The sessions of %(pids)b: those that hold or await the advisory locks read
-- by advisory_locks.sql, or (asked again with their pids) the backends that
-- block them, which the sampler follows a few steps so a chain can be shown
-- past non-advisory locks.
-- One pass over pg_stat_activity, and the columns that cost something per row
-- (the role checks, the query's prefix) only for the sessions asked about:
-- materialising every backend to follow chains from it cost as much again
-- (docs/benchmarks.md), for chains a poll rarely has.
-- pg_blocking_pids() is costly (it takes every lock-manager partition lock),
-- so it only runs for sessions that actually wait on a heavyweight lock other
-- than an advisory one: a queued advisory waiter's answer names the holder and
-- every waiter ahead of it (N^2 pids for a convoy of N), and who holds an
-- advisory key is already in advisory_locks.sql's answer.
SELECT a.pid, a.backend_start, a.datname, a.usename, a.application_name,
       pg_catalog.host(a.client_addr) AS client_addr, a.client_port, a.client_hostname, a.state, a.state_change,
       a.xact_start, a.query_start, a.wait_event_type, a.wait_event,
       pg_catalog.left(a.query, %(query_chars)b) AS query,
       -- The server's own rule for showing a session's activity (see worker_sessions.sql).
       COALESCE(pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
                OR pg_catalog.pg_has_role(a.usesysid, 'USAGE'), false) AS visible,
       CASE WHEN a.wait_event_type = 'Lock' AND a.wait_event <> 'advisory'
            THEN pg_catalog.pg_blocking_pids(a.pid) END AS blocked_by
FROM pg_catalog.pg_stat_activity AS a
WHERE a.pid = ANY (%(pids)b::pg_catalog.int4[])
