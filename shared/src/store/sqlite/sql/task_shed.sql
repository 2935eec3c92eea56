-- Load shedding of type ?1, which sheds after ?4 ms: cancel, with reason `shed`, up to ?3 of its
-- waiting tasks (queued, retry_wait) due at or before ?2 (µs: now minus shed_after), oldest
-- due first. ?5 now. Returns the shed tasks.
UPDATE tasks
SET status = 'cancelled',
    last_error = json_object(
        'code', 'shed',
        'message', printf('waited %.1f s past its due time; type %s sheds after %s s',
                          (?5 - available_at) / 1000000.0, task_type, printf('%g', ?4 / 1000.0)),
        'retryable', json('false')),
    finished_at = ?5,
    updated_at = ?5
WHERE id IN (SELECT id FROM tasks
             WHERE status IN ('queued', 'retry_wait') AND task_type = ?1 AND available_at <= ?2
             ORDER BY available_at, id LIMIT ?3)
RETURNING id, task_type
