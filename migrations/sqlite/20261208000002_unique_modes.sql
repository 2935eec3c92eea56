-- Unique enqueues (issue 24): see the PostgreSQL migration of the same name. A finished task
-- that gives its idempotency key up to a new enqueue (`unique_for`) keeps it in
-- `released_idempotency_key`; reads show either column, so its history still names the key.
ALTER TABLE tasks ADD COLUMN released_idempotency_key TEXT NULL
    CONSTRAINT tasks_released_idempotency_key_size
        CHECK (released_idempotency_key IS NULL OR length(CAST(released_idempotency_key AS BLOB)) BETWEEN 1 AND 255);
