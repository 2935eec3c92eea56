-- Counters of the server at this moment, for the cost per task of `leasehold-agent bench`; none
-- of them takes a transaction id. WAL position in bytes and the next transaction id are
-- server-wide; commits are this database's, as far as backends have flushed their statistics;
-- has_statements says whether a pg_stat_statements view is visible here; backend_pids lists the
-- server process ids of the connections whose application_name is LIKE $1 (so a caller can
-- wait for its own to be gone, and on the server's host read their CPU time); database names
-- this database, which their process titles show.
SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS wal_bytes,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_xid,
       (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
       to_regclass('pg_stat_statements') IS NOT NULL AS has_statements,
       ARRAY(SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 ORDER BY pid)
           AS backend_pids,
       current_database()::text AS database
