-- A finished holder (locked by task_enqueue_lock.sql) gives its idempotency key up to a new
-- enqueue (unique_for): the key moves to released_idempotency_key, so the row keeps it as
-- history and the unique index is free for the new task, inserted next in the same transaction.
-- $1 task id.
UPDATE tasks SET released_idempotency_key = idempotency_key, idempotency_key = NULL
WHERE id = $1 AND idempotency_key IS NOT NULL
