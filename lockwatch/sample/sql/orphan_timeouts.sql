-- The settings that end a backend whose client vanished (sample/keepalive.py),
-- one row each, with what tells the server's own value from the reading
-- session's: lockwatch SETs its own timeouts on its session (source
-- 'session': the value it started with is reset_val), and its role or
-- database may have their own (pg_db_role_setting: ``own``), which hide the
-- server's value. Over a Unix socket the server shows 0 for the keepalive
-- settings; over TCP, 0 is read back as the kernel's value. A setting this
-- version lacks (idle_session_timeout and client_connection_check_interval
-- before 14) has no row.
SELECT
    s.name,
    s.unit,
    s.setting,
    s.reset_val,
    s.boot_val,
    s.source,
    pg_catalog.current_setting('server_version_num')::int / 10000 AS major,
    pg_catalog.inet_client_addr() IS NOT NULL AS over_tcp,
    EXISTS (
        SELECT
        FROM pg_catalog.pg_db_role_setting AS r
        CROSS JOIN LATERAL pg_catalog.unnest(r.setconfig) AS c (setting)
        WHERE r.setrole IN (0, (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user))
          AND r.setdatabase IN (
              0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
          )
          AND pg_catalog.split_part(c.setting, '=', 1) = s.name
    ) AS own
FROM pg_catalog.pg_settings AS s
WHERE s.name IN (
    'tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count',
    'idle_session_timeout', 'idle_in_transaction_session_timeout',
    'client_connection_check_interval'
)
