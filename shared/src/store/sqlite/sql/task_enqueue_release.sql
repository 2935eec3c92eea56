-- A finished holder gives its idempotency key up to a new enqueue (unique_for): the key moves
-- to released_idempotency_key, kept as history, and the new task is inserted next in the same
-- write transaction. ?1 task id.
UPDATE tasks SET released_idempotency_key = idempotency_key, idempotency_key = NULL
WHERE id = ?1 AND idempotency_key IS NOT NULL
