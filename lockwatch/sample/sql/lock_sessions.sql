-- The sessions that hold or await the advisory locks read by
-- advisory_locks.sql (their pids come in as %(pids)s), plus the backends that
-- block them, followed a few steps so a chain can be shown past non-advisory
-- locks. pg_blocking_pids() is costly (it takes every lock-manager partition
-- lock), so it only runs for sessions that actually wait on a heavyweight lock
-- other than an advisory one: a queued advisory waiter's answer names the
-- holder and every waiter ahead of it (N^2 pids for a convoy of N), and who
-- holds an advisory key is already in advisory_locks.sql's answer.
WITH RECURSIVE
activity AS MATERIALIZED (
    SELECT a.pid, a.backend_start, a.datname, a.usename, a.application_name,
           pg_catalog.host(a.client_addr) AS client_addr, a.client_port, a.state, a.state_change,
           a.xact_start, a.query_start, a.wait_event_type, a.wait_event,
           pg_catalog.left(a.query, %(query_chars)s) AS query,
           -- The server's own rule for showing a session's activity (see worker_sessions.sql).
           COALESCE(pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
                    OR pg_catalog.pg_has_role(a.usesysid, 'USAGE'), false) AS visible
    FROM pg_catalog.pg_stat_activity AS a
    WHERE a.pid IS NOT NULL
),
involved (pid, blocked_by, depth) AS (
    SELECT a.pid,
           CASE WHEN a.wait_event_type = 'Lock' AND a.wait_event <> 'advisory'
                THEN pg_catalog.pg_blocking_pids(a.pid) END,
           0
    FROM activity AS a
    WHERE a.pid = ANY (%(pids)s::pg_catalog.int4[])
    UNION
    SELECT a.pid,
           CASE WHEN a.wait_event_type = 'Lock' AND a.wait_event <> 'advisory'
                THEN pg_catalog.pg_blocking_pids(a.pid) END,
           i.depth + 1
    FROM involved AS i
    CROSS JOIN LATERAL pg_catalog.unnest(i.blocked_by) AS b (pid)
    JOIN activity AS a ON a.pid = b.pid
    WHERE i.depth < %(max_chain)s
)
SELECT a.pid, a.backend_start, a.datname, a.usename, a.application_name, a.client_addr,
       a.client_port, a.state, a.state_change, a.xact_start, a.query_start, a.wait_event_type,
       a.wait_event, a.query, a.visible, i.blocked_by
FROM (SELECT DISTINCT ON (pid) pid, blocked_by FROM involved ORDER BY pid, depth) AS i
JOIN activity AS a ON a.pid = i.pid
