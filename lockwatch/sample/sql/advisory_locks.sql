-- Every advisory lock on the server, as parallel arrays in one row; the
-- sessions behind them come from lock_sessions.sql.
-- pg_lock_status() behind pg_locks copies the whole lock table, and that is
-- most of what any query on it costs. Arrays in one row add the least to it:
-- grouping per session, or sending one row per lock, costs several times
-- more at 50,000 locks (docs/benchmarks.md). What is left is per lock, per
-- array (an aggregate's step and each element's send), so each lock takes two
-- elements:
-- owners: pid × 8 + flags (int4: a pid is an OS process id, below 2^22 on
-- Linux, so × 8 stays far from int4's limit); pid 0 for a lock of a prepared
-- transaction; flags: 1 = a key of two int4 (objsubid 2), 2 = ShareLock,
-- 4 = waiting.
-- keys: classid and objid as one int8 (classid the high half), as a bigint
-- key is split into them; a pair's key1 is the high half, key2 the low.
-- waitstarts has one entry per waiting lock, in the order of the other arrays;
-- prepared one per lock with no pid (a prepared transaction's), its
-- virtualtransaction, for prepared_xacts.sql.
-- {waitstart} is pg_locks.waitstart on PostgreSQL 14+, NULL before (no such column).
-- The placeholder after the WHERE clause limits the locks to the databases
-- this target judges when other targets read the same server
-- (model/servers.py); it is empty otherwise.
-- read_at: the server's time as the statement began, before the locks were
-- copied; the sessions read afterwards are judged against it.
-- lock_manager_waits: the server's sessions waiting on the lock manager's
-- partition locks (LWLock:LockManager; lock_manager before 13) as the
-- statement ends, which the poll's pace follows (state/pace.py): read from
-- each backend's status by id, which builds no row per backend as
-- pg_stat_activity does. lockwatch's own sessions ({own_application}) are
-- not counted: they queue there too, behind each other's reads of pg_locks
-- (pg_stat_activity locks the shared catalogs pg_database and pg_authid,
-- which no fast-path slot holds), and targets of one server would slow
-- each other's pace for no load of the server's own. The application name
-- is read only for a session that waits there.
-- others: the rows of the other locktypes some session waits on (relation,
-- transactionid, tuple, ...: a Lock wait event is named by its locktype),
-- from the same copy of the lock table, for sample/lock_rows.py's
-- other_rows: their waiters and every holder or waiter of those locktypes.
-- The awaited locktypes are read from the backends' status by id, once (the
-- awaited CTE, read by InitPlans); with no session waiting on a lock but an
-- advisory one it is empty, no other row passes, others is NULL, and the
-- advisory arrays' filters stop at that one flag instead of comparing each
-- row's locktype again (three text comparisons per lock: what made a poll
-- with no waiter cost more than the advisory arrays alone,
-- python -m bench.server_parts). Each row is one text
-- array (pid, locktype, tag, mode, granted, waitstart's epoch, relation, and
-- a prepared transaction's virtualtransaction, for prepared_xacts.sql) in
-- one aggregate: an array per column cost every advisory row a FILTER check
-- per column, a fifth more at 50,000 locks with no waiter; this costs none
-- measurable. The tag names the locked object by every column that can; a
-- relation's name is looked up only for a waiter's row and a tuple lock (the
-- row a transaction id wait is about). The tuple locks are read whenever a
-- transaction id is awaited: the first session to wait on a row holds its
-- tuple lock (granted) and waits on the transaction id, so with no second
-- waiter on that row no session waits on a tuple, and the table would be
-- told only as transactionid:N.
WITH awaited AS MATERIALIZED (
    SELECT ARRAY(SELECT DISTINCT pg_catalog.pg_stat_get_backend_wait_event(b.id)
                 FROM pg_catalog.pg_stat_get_backend_idset() AS b(id)
                 WHERE pg_catalog.pg_stat_get_backend_wait_event_type(b.id) = 'Lock'
                   AND pg_catalog.pg_stat_get_backend_wait_event(b.id) <> 'advisory')
           AS locktypes)
SELECT pg_catalog.statement_timestamp() AS read_at,
       (SELECT pg_catalog.count(*)::pg_catalog.int4
        FROM pg_catalog.pg_stat_get_backend_idset() AS b(id)
        WHERE pg_catalog.pg_stat_get_backend_wait_event(b.id)
              IN ('LockManager', 'lock_manager')
          AND NOT EXISTS (
              SELECT FROM pg_catalog.pg_stat_get_activity(
                  pg_catalog.pg_stat_get_backend_pid(b.id)) AS s
              WHERE s.application_name = {own_application})) AS lock_manager_waits,
       pg_catalog.array_agg(
           COALESCE(l.pid, 0) * 8
           + CASE WHEN l.objsubid = 2 THEN 1 ELSE 0 END
           + CASE WHEN l.mode = 'ShareLock' THEN 2 ELSE 0 END
           + CASE WHEN l.granted THEN 0 ELSE 4 END
       ) FILTER (WHERE (SELECT pg_catalog.cardinality(a.locktypes) = 0 FROM awaited AS a)
                       OR l.locktype = 'advisory') AS owners,
       pg_catalog.array_agg(
           (l.classid::pg_catalog.int8 << 32) | l.objid::pg_catalog.int8
       ) FILTER (WHERE (SELECT pg_catalog.cardinality(a.locktypes) = 0 FROM awaited AS a)
                       OR l.locktype = 'advisory') AS keys,
       pg_catalog.array_agg({waitstart})
           FILTER (WHERE NOT l.granted AND l.locktype = 'advisory') AS waitstarts,
       pg_catalog.array_agg(l.virtualtransaction)
           FILTER (WHERE l.pid IS NULL AND l.locktype = 'advisory') AS prepared,
       pg_catalog.array_agg(ARRAY[COALESCE(l.pid, 0)::pg_catalog.text, l.locktype,
                                  pg_catalog.concat_ws(':', l.database, l.relation, l.page, l.tuple,
                                                       l.virtualxid, l.transactionid, l.classid,
                                                       l.objid, l.objsubid),
                                  l.mode, l.granted::pg_catalog.text,
                                  EXTRACT(epoch FROM {waitstart})::pg_catalog.text,
                                  CASE WHEN l.relation IS NOT NULL
                                            AND (NOT l.granted OR l.locktype = 'tuple')
                                       THEN l.relation::pg_catalog.regclass::pg_catalog.text END,
                                  CASE WHEN l.pid IS NULL THEN l.virtualtransaction END])
           FILTER (WHERE (SELECT pg_catalog.cardinality(a.locktypes) > 0 FROM awaited AS a)
                         AND l.locktype <> 'advisory') AS others
FROM pg_catalog.pg_locks AS l
WHERE (l.locktype = 'advisory'
       OR l.locktype = ANY ((SELECT a.locktypes FROM awaited AS a)::pg_catalog.text[])
       OR (l.locktype = 'tuple'
           AND 'transactionid' = ANY ((SELECT a.locktypes FROM awaited AS a)::pg_catalog.text[]))){scope}
