-- The orphan-ending settings set per role, per database, or per role in a
-- database (ALTER ROLE / ALTER DATABASE ... SET): a session of that role
-- or database starts with them instead of the server's. Every role may read
-- pg_db_role_setting. A NULL role or database: every one.
SELECT r.rolname::text AS role, d.datname::text AS database, c.setting
FROM pg_catalog.pg_db_role_setting AS s
CROSS JOIN LATERAL pg_catalog.unnest(s.setconfig) AS c (setting)
LEFT JOIN pg_catalog.pg_roles AS r ON r.oid = s.setrole AND s.setrole <> 0
LEFT JOIN pg_catalog.pg_database AS d ON d.oid = s.setdatabase AND s.setdatabase <> 0
WHERE pg_catalog.split_part(c.setting, '=', 1) IN (
    'tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count',
    'idle_session_timeout', 'idle_in_transaction_session_timeout',
    'client_connection_check_interval'
)
ORDER BY 1, 2, 3
