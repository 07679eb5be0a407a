-- The client sessions on the server other than lockwatch's own
-- (sample/serverless.py): none for long, and a serverless compute may sleep.
-- Another lockwatch session (another target on the same server, a second
-- lockwatch) does not keep it awake: one with lockwatch's application_name,
-- run by lockwatch's role, holding no advisory lock and waiting on none. A
-- name alone proves nothing (any client may call itself lockwatch): a client
-- of another role, or one in the middle of the locks, counts. Nor do the
-- server's own processes (backend_type other than client backend).
SELECT count(*) AS others
FROM pg_stat_activity AS a
WHERE a.backend_type = 'client backend'
  AND a.pid <> pg_backend_pid()
  AND NOT (
    a.application_name IS NOT DISTINCT FROM current_setting('application_name')
    AND a.usename IS NOT DISTINCT FROM current_user
    AND a.wait_event_type IS DISTINCT FROM 'Lock'
    AND NOT EXISTS (
      SELECT 1 FROM pg_locks AS l WHERE l.pid = a.pid AND l.locktype = 'advisory'
    )
  )
