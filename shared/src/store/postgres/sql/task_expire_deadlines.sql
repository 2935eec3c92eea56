-- Dead-letter up to $1 waiting tasks whose deadline passed (database time).
WITH due AS (
    SELECT id FROM tasks
    WHERE done_on = 'infinity' AND deadline_at IS NOT NULL AND deadline_at <= now() AND status IN ('queued', 'retry_wait')
    ORDER BY deadline_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE tasks t
SET status = 'dead',
    last_error = jsonb_build_object(
        'code', 'deadline_exceeded',
        'message', format('deadline %s passed before the task could finish', t.deadline_at),
        'retryable', false),
    finished_at = now(),
    done_on = (now() AT TIME ZONE 'UTC')::date,
    updated_at = now()
FROM due
WHERE t.id = due.id AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.deadline_at <= now()
RETURNING t.id
