-- A page of the ids of the dead tasks task_count_dead.sql counts (the dry run of
-- task_requeue_dead.sql and task_purge_dead.sql; same filter): ?1 now (bound for the shared
-- numbering, never NULL); ?2 type, ?3 error code, ?4 died at or after, ?5 died before (NULL =
-- any); newest first, below ?6 (NULL = from the newest), at most ?7. Run in the write transaction
-- of the count, so the two agree.
SELECT id FROM tasks
WHERE ?1 IS NOT NULL AND status = 'dead'
  AND (?2 IS NULL OR task_type = ?2)
  AND (?3 IS NULL OR json_extract(last_error, '$.code') = ?3)
  AND (?4 IS NULL OR finished_at >= ?4)
  AND (?5 IS NULL OR finished_at < ?5)
  AND id < coalesce(?6, 9223372036854775807)
ORDER BY id DESC
LIMIT ?7
