-- Replace or debounce the waiting holder of an idempotency key (locked by
-- task_enqueue_lock.sql): $1 task id, $2 payload text, $3 priority, $4 delay ms, $5 run_at,
-- $6 deadline, $7 timeout ms, $8 max attempts (null: the type's policy, as task_enqueue.sql),
-- $9 concurrency key, $10 debounce.
-- Replace takes every setting of the new enqueue; debounce takes its payload and start
-- (now() + delay, or run_at) and keeps the rest. The status test repeats the lock's: a row no
-- longer waiting is not changed. Returns the new available_at.
UPDATE tasks
SET payload = $2::jsonb,
    available_at = coalesce($5::timestamptz, now() + make_interval(secs => $4::float8 / 1000.0)),
    priority = CASE WHEN $10::boolean THEN priority ELSE $3::smallint END,
    deadline_at = CASE WHEN $10::boolean THEN deadline_at ELSE $6::timestamptz END,
    timeout_ms = CASE WHEN $10::boolean THEN timeout_ms ELSE $7::bigint END,
    max_attempts = CASE WHEN $10::boolean THEN max_attempts
                        ELSE coalesce($8::integer,
                                      (SELECT p.max_attempts FROM policies p WHERE p.scope = tasks.task_type),
                                      (SELECT p.max_attempts FROM policies p WHERE p.scope = '*'), 25) END,
    concurrency_key = CASE WHEN $10::boolean THEN concurrency_key ELSE $9::text END,
    updated_at = now()
WHERE id = $1 AND done_on = 'infinity' AND status IN ('queued', 'retry_wait')
RETURNING id
