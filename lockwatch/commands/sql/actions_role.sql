-- Who lockwatch terminate acts as, and what that role may do and see:
-- pg_signal_backend to end or cancel another role's session, pg_read_all_stats
-- (pg_monitor has it) to see another role's backend_start, without which a
-- session cannot be told from a later one given the same pid.
SELECT session_user AS role,
       r.rolsuper AS superuser,
       pg_catalog.pg_has_role('pg_signal_backend', 'USAGE') AS signals,
       pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all,
       pg_catalog.current_setting('server_version_num')::int AS version
FROM pg_catalog.pg_roles AS r
WHERE r.rolname = current_user
