-- One task. ?1 type, ?2 payload text, ?3 priority, ?4 available_at, ?5 deadline_at,
-- ?6 timeout ms, ?7 max attempts (null: the type's policy, else the global row's, else 25 =
-- DEFAULT_MAX_ATTEMPTS), ?8 idempotency key, ?9 now,
-- ?10 concurrency key.
-- A known idempotency key inserts nothing and returns no row (see task_enqueue_existing.sql).
INSERT INTO tasks (task_type, payload, priority, available_at, deadline_at, timeout_ms,
                   max_attempts, idempotency_key, created_at, updated_at, concurrency_key)
VALUES (?1, ?2, ?3, ?4, ?5, ?6,
        coalesce(?7, (SELECT max_attempts FROM policies WHERE scope = ?1),
                 (SELECT max_attempts FROM policies WHERE scope = '*'), 25),
        ?8, ?9, ?9, ?10)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id
