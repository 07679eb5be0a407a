-- The floor: the bare join any tool needs to see who holds and awaits which
-- advisory lock, with the columns lockwatch reads, and nothing else.
SELECT l.pid, l.classid, l.objid, l.objsubid, l.mode, l.granted, l.waitstart,
       a.backend_start, a.datname, a.usename, a.application_name, a.client_addr,
       a.client_port, a.state, a.state_change, a.xact_start, a.query_start,
       a.wait_event_type, a.wait_event, a.query
FROM pg_catalog.pg_locks AS l
JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
