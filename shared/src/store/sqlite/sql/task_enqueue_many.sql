-- Many tasks without idempotency keys in one statement. ?1 a JSON array of rows
-- [type, payload, priority, available_at, deadline_at, timeout_ms, max_attempts,
-- concurrency_key]; ?2 now.
-- Rows are inserted in the order json_each yields them, so ids grow in input order.
-- A null max_attempts takes the type's policy value, else the global row's, else 25
-- (DEFAULT_MAX_ATTEMPTS): resolved once per distinct type of the batch, then joined.
WITH type_attempts AS MATERIALIZED (
    SELECT s.task_type, coalesce(tp.max_attempts, gp.max_attempts, 25) AS max_attempts
    FROM (SELECT DISTINCT json_extract(value, '$[0]') AS task_type FROM json_each(?1)
          WHERE json_extract(value, '$[6]') IS NULL) s
    LEFT JOIN policies tp ON tp.scope = s.task_type
    LEFT JOIN policies gp ON gp.scope = '*'
)
INSERT INTO tasks (task_type, payload, priority, available_at, deadline_at, timeout_ms,
                   max_attempts, concurrency_key, created_at, updated_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), json_extract(value, '$[3]'),
       json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       coalesce(json_extract(j.value, '$[6]'), ta.max_attempts), json_extract(value, '$[7]'), ?2, ?2
FROM json_each(?1) j
LEFT JOIN type_attempts ta ON ta.task_type = json_extract(j.value, '$[0]')
ORDER BY j.key
RETURNING id
