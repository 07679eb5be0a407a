-- The settings that end a backend whose client vanished (sample/keepalive.py),
-- in seconds, and whether this session came over TCP: over a Unix socket the
-- server shows 0 for the keepalive settings. A setting this version lacks
-- (idle_session_timeout and client_connection_check_interval before 14) is
-- absent, so NULL.
SELECT
    current_setting('server_version_num')::int / 10000 AS major,
    inet_client_addr() IS NOT NULL AS over_tcp,
    max(CASE name WHEN 'tcp_keepalives_idle' THEN seconds END) AS tcp_keepalives_idle,
    max(CASE name WHEN 'tcp_keepalives_interval' THEN seconds END) AS tcp_keepalives_interval,
    max(CASE name WHEN 'tcp_keepalives_count' THEN seconds END) AS tcp_keepalives_count,
    max(CASE name WHEN 'idle_session_timeout' THEN seconds END) AS idle_session_timeout,
    max(CASE name WHEN 'idle_in_transaction_session_timeout' THEN seconds END)
        AS idle_in_transaction_session_timeout,
    max(CASE name WHEN 'client_connection_check_interval' THEN seconds END)
        AS client_connection_check_interval
FROM (
    SELECT
        name,
        setting::float8 * CASE unit WHEN 'ms' THEN 0.001 WHEN 'min' THEN 60 ELSE 1 END AS seconds
    FROM pg_settings
    WHERE name IN (
        'tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count',
        'idle_session_timeout', 'idle_in_transaction_session_timeout',
        'client_connection_check_interval'
    )
) AS settings
