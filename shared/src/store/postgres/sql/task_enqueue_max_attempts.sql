-- The max attempts a task of each type in $1 gets when it gives none: the type's policy value,
-- else the global row's, else 25 (DEFAULT_MAX_ATTEMPTS). One row per type; read once per bulk
-- enqueue (for the types of its tasks without their own), so the bulk insert stays as it was.
SELECT t.task_type, coalesce(tp.max_attempts, gp.max_attempts, 25) AS max_attempts
FROM unnest($1::text[]) AS t(task_type)
LEFT JOIN policies tp ON tp.scope = t.task_type
LEFT JOIN policies gp ON gp.scope = '*'
