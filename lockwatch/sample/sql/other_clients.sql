-- The client sessions on the server other than lockwatch's own
-- (sample/serverless.py): none for long, and a serverless compute may sleep.
-- Sessions with lockwatch's application_name (another target on the same
-- server, a second lockwatch) do not keep it awake either; nor do the
-- server's own processes (backend_type other than client backend).
SELECT count(*) AS others
FROM pg_stat_activity
WHERE backend_type = 'client backend'
  AND pid <> pg_backend_pid()
  AND application_name IS DISTINCT FROM current_setting('application_name')
