-- Many tasks without idempotency keys in one statement. ?1 a JSON array of rows
-- [type, payload, priority, available_at, deadline_at, timeout_ms, max_attempts,
-- concurrency_key]; ?2 now.
-- Rows are inserted in the order json_each yields them, so ids grow in input order.
INSERT INTO tasks (task_type, payload, priority, available_at, deadline_at, timeout_ms,
                   max_attempts, concurrency_key, created_at, updated_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), json_extract(value, '$[3]'),
       json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), json_extract(value, '$[7]'), ?2, ?2
FROM json_each(?1) ORDER BY key
RETURNING id
