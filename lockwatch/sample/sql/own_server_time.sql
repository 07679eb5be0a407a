-- What lockwatch's polls cost the server: the execution time (ms) that
-- pg_stat_statements has counted for lockwatch's own role in this database
-- (sample/server_time.py). {statements} is the extension's function in the
-- schema it was created in, asked without the statements' texts (false), so
-- that no query text is read; {exec_time} is total_exec_time (13+) or
-- total_time (12). NULL when it counts no statement of the role here
-- (pg_stat_statements.track = none, say): unknown, not 0.
SELECT pg_catalog.sum(s.{exec_time})::pg_catalog.float8 AS exec_ms
FROM {statements}(false) AS s
WHERE s.userid = (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = CURRENT_USER)
  AND s.dbid = (SELECT d.oid FROM pg_catalog.pg_database AS d
                WHERE d.datname = pg_catalog.current_database())
