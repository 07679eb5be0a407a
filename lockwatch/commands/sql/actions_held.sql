-- The advisory locks a session (by pid) or a prepared transaction (by its
-- xid: its locks have no pid, and share the virtualtransaction of the lock
-- it holds on its own xid) holds now, and how many sessions wait on each:
-- what ending it frees. pg_locks is read once (a CTE that is materialised):
-- each read copies the server's whole lock table.
WITH l AS MATERIALIZED (
    SELECT l.pid, l.virtualtransaction, l.granted, l.locktype, l.database, l.classid,
           l.objid, l.objsubid, l.transactionid::text::pg_catalog.int8 AS xid
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype IN ('advisory', 'transactionid')
),
prepared AS (
    SELECT p.virtualtransaction FROM l AS p
    WHERE p.locktype = 'transactionid' AND p.pid IS NULL AND p.xid = %(xid)s
)
SELECT d.datname AS database, h.classid::pg_catalog.int8 AS classid,
       h.objid::pg_catalog.int8 AS objid, h.objsubid::pg_catalog.int4 AS objsubid,
       pg_catalog.count(DISTINCT w.pid) AS waiters
FROM l AS h
LEFT JOIN l AS w
  ON w.locktype = 'advisory' AND NOT w.granted AND w.database = h.database
     AND w.classid = h.classid AND w.objid = h.objid AND w.objsubid = h.objsubid
LEFT JOIN pg_catalog.pg_database AS d ON d.oid = h.database
WHERE h.locktype = 'advisory' AND h.granted
  AND (h.pid = %(pid)s
       OR (h.pid IS NULL AND h.virtualtransaction IN (SELECT virtualtransaction FROM prepared)))
GROUP BY 1, 2, 3, 4
