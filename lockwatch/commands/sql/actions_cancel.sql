-- Cancel the session's running statement, only while the pid is still the
-- one that started at backend_start and it runs one.
SELECT pg_catalog.pg_cancel_backend(a.pid) AS signalled
FROM pg_catalog.pg_stat_activity AS a
WHERE a.pid = %(pid)s AND a.backend_start = %(backend_start)s AND a.state = 'active'
