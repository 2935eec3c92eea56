-- Statements run in this database so far, by pg_stat_statements (only read when the view exists;
-- it fails when the extension's library is not in shared_preload_libraries).
SELECT coalesce(sum(calls), 0)::bigint
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
