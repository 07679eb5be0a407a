-- Every backend that holds or waits for an advisory lock, with its locks
-- folded into arrays (one row per session keeps 50,000 locks on 20 sessions
-- at 20 rows of session data), plus the backends that block them, followed
-- a few steps so a chain can be shown past non-advisory locks.
-- pg_blocking_pids() is costly (it takes every lock-manager partition lock),
-- so it only runs for sessions that actually wait on a heavyweight lock.
-- {waitstart} is pg_locks.waitstart on PostgreSQL 14+, NULL before (no such column).
WITH RECURSIVE
advisory AS MATERIALIZED (
    SELECT l.pid, l.classid, l.objid, l.objsubid, l.mode, l.granted, {waitstart} AS waitstart
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.pid IS NOT NULL
),
activity AS MATERIALIZED (
    SELECT a.pid, a.backend_start, a.datname, a.usename, a.application_name,
           pg_catalog.host(a.client_addr) AS client_addr, a.client_port, a.state, a.state_change,
           a.xact_start, a.query_start, a.wait_event_type, a.wait_event,
           pg_catalog.left(a.query, %(query_chars)s) AS query
    FROM pg_catalog.pg_stat_activity AS a
    WHERE a.pid IS NOT NULL
),
involved (pid, blocked_by, depth) AS (
    SELECT a.pid,
           CASE WHEN a.wait_event_type = 'Lock' THEN pg_catalog.pg_blocking_pids(a.pid) END,
           0
    FROM activity AS a
    WHERE a.pid IN (SELECT DISTINCT pid FROM advisory)
    UNION
    SELECT a.pid,
           CASE WHEN a.wait_event_type = 'Lock' THEN pg_catalog.pg_blocking_pids(a.pid) END,
           i.depth + 1
    FROM involved AS i
    CROSS JOIN LATERAL pg_catalog.unnest(i.blocked_by) AS b (pid)
    JOIN activity AS a ON a.pid = b.pid
    WHERE i.depth < %(max_chain)s
),
held AS (
    SELECT pid,
           pg_catalog.array_agg(classid::bigint) AS classids,
           pg_catalog.array_agg(objid::bigint) AS objids,
           pg_catalog.array_agg(objsubid) AS objsubids,
           pg_catalog.array_agg(mode) AS modes,
           pg_catalog.array_agg(granted) AS granteds,
           pg_catalog.array_agg(waitstart) AS waitstarts
    FROM advisory
    GROUP BY pid
)
SELECT a.pid, a.backend_start, a.datname, a.usename, a.application_name, a.client_addr,
       a.client_port, a.state, a.state_change, a.xact_start, a.query_start, a.wait_event_type,
       a.wait_event, a.query, i.blocked_by,
       h.classids, h.objids, h.objsubids, h.modes, h.granteds, h.waitstarts
FROM (SELECT DISTINCT ON (pid) pid, blocked_by FROM involved ORDER BY pid, depth) AS i
JOIN activity AS a ON a.pid = i.pid
LEFT JOIN held AS h ON h.pid = i.pid
