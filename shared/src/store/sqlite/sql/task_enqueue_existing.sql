-- The task holding idempotency key ?1, with what an enqueue's mode judges: read when
-- task_enqueue.sql inserted nothing, inside the enqueue's write transaction (so no other
-- writer — a claim, a completion, another enqueue — can change it before it is judged).
SELECT id, status, finished_at FROM tasks WHERE idempotency_key = ?1
