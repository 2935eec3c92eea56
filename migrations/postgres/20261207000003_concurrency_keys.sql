-- Per-key concurrency (issue 23). A task may carry a concurrency key (a tenant, an account);
-- a task type's policy may allow at most `per_key_concurrency` running tasks per key. Tasks
-- with a key are claimed through their own index, a key at a time, round-robin across the
-- keys of their type, so a key with a long backlog never holds back the keys behind it; tasks
-- without one keep the claim index, which no longer holds keyed tasks at all (the walk over
-- keyless tasks never reads past a keyed backlog).
ALTER TABLE tasks
    ADD COLUMN concurrency_key text,
    ADD CONSTRAINT tasks_concurrency_key_size
        CHECK (concurrency_key IS NULL OR octet_length(concurrency_key) BETWEEN 1 AND 200);

ALTER TABLE policies
    ADD COLUMN per_key_concurrency integer,
    ADD CONSTRAINT policies_per_key_range
        CHECK (per_key_concurrency IS NULL OR per_key_concurrency BETWEEN 1 AND 1000000),
    ADD CONSTRAINT policies_per_key_types_only CHECK (scope <> '*' OR per_key_concurrency IS NULL);

-- Keyless waiting tasks in claim order (every task is keyless until now: the rebuilt index
-- holds the same rows as the one it replaces).
CREATE INDEX tasks_claim_keyless_idx ON tasks (priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL;
DROP INDEX tasks_claim_idx;
ALTER INDEX tasks_claim_keyless_idx RENAME TO tasks_claim_idx;
-- Keyed waiting tasks: a skip scan finds the next key of a type, then the key's tasks come in
-- claim order. The key test comes first: every insert and status change evaluates the
-- predicate, and for keyless tasks it stops there (measured: a drain of keyless work paid ~2 %
-- with the status test first).
CREATE INDEX tasks_claim_key_idx ON tasks (task_type, concurrency_key, priority DESC, available_at, id)
    WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'retry_wait');
-- Leased tasks by type and key: the running count of a type and of one key, from one index
-- (a second partial index would cost every status change one more predicate to evaluate).
CREATE INDEX tasks_leased_type_key_idx ON tasks (task_type, concurrency_key)
    WHERE status IN ('running', 'cancel_requested');
DROP INDEX tasks_leased_type_idx;
ALTER INDEX tasks_leased_type_key_idx RENAME TO tasks_leased_type_idx;
