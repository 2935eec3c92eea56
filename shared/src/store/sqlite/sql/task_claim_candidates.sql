-- Up to ?3 due tasks of types ?2 (JSON array) at now ?1, within their deadline, in claim
-- order (priority, then due time, then id), keyless ones only (tasks with a concurrency key
-- come from task_key_heads.sql). The claim picks from them within its limits.
SELECT id, task_type, priority, available_at FROM tasks
WHERE status IN ('queued', 'retry_wait') AND available_at <= ?1
  AND (deadline_at IS NULL OR deadline_at > ?1)
  AND task_type IN (SELECT value FROM json_each(?2))
  AND concurrency_key IS NULL
ORDER BY priority DESC, available_at, id LIMIT ?3
