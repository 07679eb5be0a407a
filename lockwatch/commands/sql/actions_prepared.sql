-- The prepared transaction that has the incident root's gid now: a gid is
-- the client's word and may be given again once the first is finished, so
-- its xid and when it was prepared tell it from a later one. ROLLBACK
-- PREPARED is allowed to its owner and to superusers.
SELECT x.transaction::text::pg_catalog.int8 AS xid, x.prepared, x.owner::text AS owner,
       x.database::text AS database, x.owner = current_user AS owns
FROM pg_catalog.pg_prepared_xacts AS x
WHERE x.gid = %(gid)s
