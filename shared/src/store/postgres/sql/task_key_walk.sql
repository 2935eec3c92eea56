-- The keys a claim visits, in the claim's transaction after task_claim_lock.sql, for the types
-- $1 that have a waiting keyed task: for each, a skip scan of tasks_claim_key_idx from the key
-- after the claimer's cursor for that type ($2, $3: type, last key served), one index descent
-- per key, wrapping round to the first key. It counts keys with a task due now, at most the
-- batch $4 plus the type's running keyed tasks (keys that may be full) plus a few, passing over
-- keys whose tasks are all scheduled later (at most four times as many descents). Keys take
-- turns this way, so a key with a long backlog never holds back the keys after it. Which tasks
-- of these keys start is decided by the claim statement, from its own snapshot.
-- Returns rows by `kind`: one `type` row per walked type (`roomy`: it looks able to start
-- something), one `key` row per key with a task due now (`walk_key`, in `walk_pos` order), one
-- `end` row per type (the last key visited, due or not).
WITH RECURSIVE cur AS (
    SELECT t.task_type, coalesce(c.after, '') AS after,
           least($4::int + 8 + (
               SELECT count(*) FROM tasks r
               WHERE r.done_on = 'infinity' AND r.status IN ('running', 'cancel_requested') AND r.task_type = t.task_type
                 AND r.concurrency_key IS NOT NULL)::int, 1000) AS budget
    FROM unnest($1::text[]) AS t(task_type)
    LEFT JOIN unnest($2::text[], $3::text[]) AS c(task_type, after) ON c.task_type = t.task_type
    -- A paused type or one whose breaker is open starts nothing: its round waits.
    WHERE NOT EXISTS (SELECT 1 FROM policies p
                      WHERE p.scope = t.task_type AND (p.paused OR p.breaker_state = 'open'))
),
-- Whether a type looks able to start anything (its limit or half-open try not taken, as this
-- statement's snapshot shows): only then does its round move on after the claim.
room AS (
    SELECT c.task_type, NOT EXISTS (
               SELECT 1 FROM policies p
               WHERE p.scope = c.task_type
                 AND (p.max_concurrency IS NOT NULL OR p.breaker_state = 'half_open')
                 AND CASE WHEN p.breaker_state = 'half_open'
                          THEN least(1, coalesce(p.max_concurrency, 1))
                          ELSE p.max_concurrency END <= (
                     SELECT count(*) FROM tasks r
                     WHERE r.done_on = 'infinity' AND r.status IN ('running', 'cancel_requested')
                       AND r.task_type = c.task_type)) AS roomy
    FROM cur c
),
-- From the cursor to the last key. `n` counts keys with a task due now (only those are
-- returned), `d` index descents, at most four times the budget: keys whose tasks are all
-- scheduled later do not use up the round, yet cannot make it unbounded.
fwd(task_type, k, due, n, d, budget) AS (
    SELECT c.task_type, f.k, f.due, f.due::int, 1, c.budget
    FROM cur c
    CROSS JOIN LATERAL (
        SELECT x.k, EXISTS (
                   SELECT 1 FROM tasks t
                   WHERE t.task_type = c.task_type AND t.concurrency_key = x.k
                     AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = c.task_type AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
                AND t.concurrency_key > c.after
              ORDER BY t.concurrency_key LIMIT 1) x
    ) f
    UNION ALL
    SELECT w.task_type, nx.k, nx.due, w.n + nx.due::int, w.d + 1, w.budget
    FROM fwd w
    CROSS JOIN LATERAL (
        SELECT x.k, EXISTS (
                   SELECT 1 FROM tasks t
                   WHERE t.task_type = w.task_type AND t.concurrency_key = x.k
                     AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = w.task_type AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
                AND t.concurrency_key > w.k
              ORDER BY t.concurrency_key LIMIT 1) x
    ) nx
    WHERE w.n < w.budget AND w.d < 4 * w.budget
),
-- Round again from the first key up to the cursor's, with what is left of the budget.
back(task_type, k, due, n, d, budget, max_d, after) AS (
    SELECT c.task_type, f.k, f.due, f.due::int, c.used + 1, c.budget - c.found, 4 * c.budget,
           c.after
    FROM (SELECT c.*,
                 coalesce((SELECT max(w.n) FROM fwd w WHERE w.task_type = c.task_type), 0) AS found,
                 coalesce((SELECT max(w.d) FROM fwd w WHERE w.task_type = c.task_type), 0) AS used
          FROM cur c) c
    CROSS JOIN LATERAL (
        SELECT x.k, EXISTS (
                   SELECT 1 FROM tasks t
                   WHERE t.task_type = c.task_type AND t.concurrency_key = x.k
                     AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = c.task_type AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
                AND t.concurrency_key > ''
              ORDER BY t.concurrency_key LIMIT 1) x
    ) f
    WHERE c.after <> '' AND c.found < c.budget AND c.used < 4 * c.budget AND f.k <= c.after
    UNION ALL
    SELECT w.task_type, nx.k, nx.due, w.n + nx.due::int, w.d + 1, w.budget, w.max_d, w.after
    FROM back w
    CROSS JOIN LATERAL (
        SELECT x.k, EXISTS (
                   SELECT 1 FROM tasks t
                   WHERE t.task_type = w.task_type AND t.concurrency_key = x.k
                     AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = w.task_type AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
                AND t.concurrency_key > w.k
              ORDER BY t.concurrency_key LIMIT 1) x
    ) nx
    WHERE w.n < w.budget AND w.d < w.max_d AND nx.k <= w.after
)
SELECT task_type AS scope, 'type' AS kind, NULL::text AS walk_key, NULL::int AS walk_pos, roomy FROM room
UNION ALL
SELECT task_type, 'key', k, d, NULL FROM fwd WHERE due
UNION ALL
SELECT task_type, 'key', k, 1000000 + d, NULL FROM back WHERE due
UNION ALL
-- The last key visited, due or not: where the round goes on when nothing due was found.
SELECT task_type, 'end', k, pos, NULL
FROM (SELECT DISTINCT ON (task_type) task_type, k, pos
      FROM (SELECT task_type, k, d AS pos FROM fwd
            UNION ALL SELECT task_type, k, 1000000 + d FROM back) v
      ORDER BY task_type, pos DESC) e
