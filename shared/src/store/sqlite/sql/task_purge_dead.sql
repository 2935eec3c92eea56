-- Operator purge of the dead-letter queue: delete every dead task matching (same filter as
-- task_requeue_dead.sql) ?1 now (bound for the shared numbering, never NULL); ?2 type, ?3 error
-- code, ?4 died at or after, ?5 died before (NULL = any). Their attempts go with them (trigger
-- tasks_delete_attempts). Returns one row per task.
DELETE FROM tasks
WHERE ?1 IS NOT NULL AND status = 'dead'
  AND (?2 IS NULL OR task_type = ?2)
  AND (?3 IS NULL OR json_extract(last_error, '$.code') = ?3)
  AND (?4 IS NULL OR finished_at >= ?4)
  AND (?5 IS NULL OR finished_at < ?5)
RETURNING id
