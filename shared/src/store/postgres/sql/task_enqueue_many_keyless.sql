-- Many tasks without idempotency keys in one statement (task_enqueue_many.sql's case where no
-- row can conflict): from parallel arrays, one result row per input, in input order. Every row
-- is created, so the ids drawn in `input` are the answer: no join back to the inserted rows, no
-- sort by key, no look for an existing holder. Each of those was planned per connection with
-- custom plans first, and over a queue the planner had no statistics for it sorted the whole
-- of tasks by key (a second a statement of 10,000); this one has no join to plan wrong.
WITH input AS MATERIALIZED (
    SELECT nextval((SELECT pg_get_serial_sequence('tasks', 'id')::regclass)) AS id, i.*
    FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[], $5::timestamptz[],
                $6::timestamptz[], $7::bigint[], $8::integer[], $9::text[], $10::text[])
         WITH ORDINALITY AS i(task_type, payload, priority, delay_ms, run_at, deadline_at,
                              timeout_ms, max_attempts, idempotency_key, concurrency_key, ord)
),
ins AS (
    INSERT INTO tasks (id, task_type, payload, priority, available_at, deadline_at, timeout_ms,
                       max_attempts, idempotency_key, concurrency_key)
    SELECT id, task_type, payload::jsonb, priority,
           coalesce(run_at, now() + make_interval(secs => delay_ms / 1000.0)),
           deadline_at, timeout_ms, max_attempts, idempotency_key, concurrency_key
    FROM input
)
SELECT ord, id, true AS created
FROM input
ORDER BY ord
