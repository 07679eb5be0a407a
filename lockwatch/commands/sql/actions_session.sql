-- The session that has the incident root's pid now, as the actions role sees
-- it: of another role's session without pg_read_all_stats, backend_start,
-- state and the times are NULL (usesysid is shown to every role).
SELECT a.backend_start, a.state, a.backend_type, a.usename, a.application_name,
       a.client_addr::text AS client_addr, a.datname, a.wait_event_type, a.wait_event,
       pg_catalog.date_part('epoch', pg_catalog.statement_timestamp() - a.xact_start)
           AS xact_seconds,
       pg_catalog.date_part('epoch', pg_catalog.statement_timestamp() - a.state_change)
           AS state_seconds,
       COALESCE(pg_catalog.pg_has_role(a.usesysid, 'USAGE'), false) AS same_role,
       COALESCE((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = a.usesysid), false)
           AS superuser_session
FROM pg_catalog.pg_stat_activity AS a
WHERE a.pid = %(pid)s
