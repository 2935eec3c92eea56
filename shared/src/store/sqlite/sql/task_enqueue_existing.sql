-- The task holding idempotency key ?1: read when task_enqueue.sql inserted nothing.
SELECT id FROM tasks WHERE idempotency_key = ?1
