-- Requeue every dead task matching ?2 type, ?3 error code, ?4 died at or after, ?5 died before
-- (NULL = any), as task_requeue.sql does one, due at now ?1. Returns one row per task.
WITH upd AS (
  SELECT id FROM tasks
  WHERE status = 'dead'
  AND (?2 IS NULL OR task_type = ?2)
  AND (?3 IS NULL OR json_extract(last_error, '$.code') = ?3)
  AND (?4 IS NULL OR finished_at >= ?4)
  AND (?5 IS NULL OR finished_at < ?5))
UPDATE tasks SET status = 'queued', attempt = 0, available_at = ?1, lease_until = NULL,
    heartbeat_at = NULL, started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, snoozes = 0,
    updated_at = ?1
WHERE id IN (SELECT id FROM upd)
RETURNING id
