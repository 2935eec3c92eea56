-- The first ?4 due tasks of key ?2 of type ?1 at now ?3, within their deadline, in claim order.
SELECT id, task_type, priority, available_at FROM tasks
WHERE task_type = ?1 AND concurrency_key = ?2 AND status IN ('queued', 'retry_wait')
  AND available_at <= ?3 AND (deadline_at IS NULL OR deadline_at > ?3)
ORDER BY priority DESC, available_at, id
LIMIT ?4
