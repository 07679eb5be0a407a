-- The prepared (two-phase) transactions behind the advisory locks that
-- advisory_locks.sql found with no pid, by their virtualtransaction: each
-- prepared transaction holds the lock on its own xid under the same one.
-- Run only when there are such locks: it reads pg_locks a second time.
SELECT l.virtualtransaction AS vxid,
       x.transaction::text::bigint AS xid, x.gid, x.owner, x.database, x.prepared,
       pg_catalog.date_part('epoch', pg_catalog.statement_timestamp() - x.prepared) AS age
FROM pg_catalog.pg_prepared_xacts AS x
JOIN pg_catalog.pg_locks AS l
  ON l.locktype = 'transactionid' AND l.transactionid = x.transaction AND l.pid IS NULL
WHERE l.virtualtransaction = ANY (%(vxids)s::pg_catalog.text[])
