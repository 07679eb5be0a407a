-- End the session only while the pid is still the one that started at
-- backend_start: checked in the same statement that signals it.
SELECT pg_catalog.pg_terminate_backend(a.pid) AS signalled
FROM pg_catalog.pg_stat_activity AS a
WHERE a.pid = %(pid)s AND a.backend_start = %(backend_start)s
