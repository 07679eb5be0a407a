-- The sessions of %(pids)b: those that hold or await the advisory locks read
-- by advisory_locks.sql, and every session waiting on a lock of another
-- locktype with those it waits on (its other_* rows).
-- One pass over pg_stat_activity, and the columns that cost something per row
-- (the role checks, the query's prefix) only for the sessions asked about:
-- materialising every backend to follow chains from it cost as much again
-- (docs/benchmarks.md), for chains a poll rarely has.
-- Who blocks whom comes from the lock rows already read (model/lock_waits.py),
-- never from pg_blocking_pids(): it takes every lock-manager partition lock
-- per call, and names N^2 pids for a queue of N.
SELECT a.pid, a.backend_start, a.datname, a.usename, a.application_name,
       pg_catalog.host(a.client_addr) AS client_addr, a.client_port, a.client_hostname, a.state, a.state_change,
       a.xact_start, a.query_start, a.wait_event_type, a.wait_event,
       pg_catalog.left(a.query, %(query_chars)b) AS query,
       -- query_id: on PostgreSQL 14+ (NULL unless the server computes it; none
       -- before): a query's fingerprint without its text.
       {query_id} AS query_id,
       -- The server's own rule for showing a session's activity (see worker_sessions.sql).
       COALESCE(pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
                OR pg_catalog.pg_has_role(a.usesysid, 'USAGE'), false) AS visible
FROM pg_catalog.pg_stat_activity AS a
WHERE a.pid = ANY (%(pids)b::pg_catalog.int4[])
