-- One task. $1 type, $2 payload text, $3 priority, $4 delay ms, $5 run_at, $6 deadline,
-- $7 timeout ms, $8 max attempts (null: the type's policy, else the global row's, else 25 =
-- DEFAULT_MAX_ATTEMPTS), $9 idempotency key, $10 concurrency key.
-- A known idempotency key returns the existing row with created = false and its status
-- (read, not locked: task_enqueue_lock.sql locks it when the enqueue's mode changes it).
-- The unique index sees live tasks only (tasks is partitioned by done_on, migration
-- 20261210000001), so a finished holder is looked for first; one that finished while this
-- statement waited on its live index entry is caught by the insert trigger (unique_violation on
-- tasks_idempotency_key_done), and the caller runs the statement again.
WITH ins AS (
    INSERT INTO tasks (task_type, payload, priority, available_at, deadline_at, timeout_ms,
                       max_attempts, idempotency_key, concurrency_key)
    SELECT $1, $2::jsonb, $3, coalesce($5, now() + make_interval(secs => $4 / 1000.0)), $6, $7,
           coalesce($8::integer,
                    (SELECT max_attempts FROM policies WHERE scope = $1),
                    (SELECT max_attempts FROM policies WHERE scope = '*'), 25),
           $9, $10
    WHERE $9::text IS NULL
       OR NOT EXISTS (SELECT 1 FROM tasks d WHERE d.idempotency_key = $9 AND d.done_on <> 'infinity')
    ON CONFLICT (idempotency_key, done_on) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT id, true AS created, NULL::text AS status FROM ins
UNION ALL
SELECT t.id, false AS created, t.status::text AS status FROM tasks t
WHERE $9::text IS NOT NULL AND t.idempotency_key = $9 AND NOT EXISTS (SELECT 1 FROM ins)
