-- Replace or debounce the waiting holder of an idempotency key, in the enqueue's write
-- transaction: ?1 task id, ?2 payload text, ?3 available_at, ?4 priority, ?5 deadline_at,
-- ?6 timeout ms, ?7 max attempts (null: the type's policy, as task_enqueue.sql), ?8 concurrency
-- key, ?9 debounce (0/1), ?10 now.
-- Replace takes every setting of the new enqueue; debounce takes its payload and start and
-- keeps the rest. A row no longer waiting is not changed.
UPDATE tasks
SET payload = ?2,
    available_at = ?3,
    priority = CASE WHEN ?9 THEN priority ELSE ?4 END,
    deadline_at = CASE WHEN ?9 THEN deadline_at ELSE ?5 END,
    timeout_ms = CASE WHEN ?9 THEN timeout_ms ELSE ?6 END,
    max_attempts = CASE WHEN ?9 THEN max_attempts
                        ELSE coalesce(?7, (SELECT p.max_attempts FROM policies p WHERE p.scope = tasks.task_type),
                                      (SELECT p.max_attempts FROM policies p WHERE p.scope = '*'), 25) END,
    concurrency_key = CASE WHEN ?9 THEN concurrency_key ELSE ?8 END,
    updated_at = ?10
WHERE id = ?1 AND status IN ('queued', 'retry_wait')
RETURNING id
