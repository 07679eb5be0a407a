-- The client sessions of worker groups: application_name matching any of the
-- groups' patterns (LIKE, with \ as the escape). Their advisory-lock waits come
-- from the lock query of the same poll; this adds the sessions that hold or
-- wait for nothing, so "5 of 6 workers" can be counted.
SELECT a.pid, a.backend_start, a.datname, a.usename, a.application_name,
       pg_catalog.host(a.client_addr) AS client_addr, a.client_port, a.client_hostname, a.state,
       a.state_change, a.xact_start, a.query_start, a.wait_event_type, a.wait_event,
       pg_catalog.left(a.query, %(query_chars)s) AS query,
       -- Whether lockwatch's role may see the session's activity: the server shows
       -- it to members of pg_read_all_stats (pg_monitor) and of the session's role,
       -- and NULL (the query: '<insufficient privilege>') to anyone else.
       COALESCE(pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')
                OR pg_catalog.pg_has_role(a.usesysid, 'USAGE'), false) AS visible
FROM pg_catalog.pg_stat_activity AS a
WHERE a.backend_type = 'client backend'
  AND a.pid <> pg_catalog.pg_backend_pid()
  AND a.application_name LIKE ANY (%(patterns)s)
ORDER BY a.pid
LIMIT %(max_sessions)s
