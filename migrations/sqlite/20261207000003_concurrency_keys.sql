-- Per-key concurrency (issue 23): see the PostgreSQL migration of the same name.
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT NULL
    CONSTRAINT tasks_concurrency_key_size
        CHECK (concurrency_key IS NULL OR length(CAST(concurrency_key AS BLOB)) BETWEEN 1 AND 200);
ALTER TABLE policies ADD COLUMN per_key_concurrency INTEGER NULL
    CONSTRAINT policies_per_key_range
        CHECK (per_key_concurrency IS NULL OR per_key_concurrency BETWEEN 1 AND 1000000)
    CONSTRAINT policies_per_key_types_only CHECK (scope <> '*' OR per_key_concurrency IS NULL);

DROP INDEX tasks_claim_idx;
CREATE INDEX tasks_claim_idx ON tasks (priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL;
CREATE INDEX tasks_claim_key_idx ON tasks (task_type, concurrency_key, priority DESC, available_at, id)
    WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'retry_wait');
DROP INDEX tasks_leased_type_idx;
CREATE INDEX tasks_leased_type_idx ON tasks (task_type, concurrency_key)
    WHERE status IN ('running', 'cancel_requested');
