-- The first statement of a claim transaction.
-- 1. A shared advisory lock on the policy guard (19529, 0), held to the end of the transaction:
--    claims never block each other on it, but a policy change (which takes it exclusively)
--    waits for claims in flight, so a limit never starts while a claim that ignored it is
--    still uncommitted.
-- 2. For each scope with a concurrency, rate or per-key limit or a half-open breaker that this
--    claim touches (global '*' and each
--    requested type), try a transaction-level advisory lock (19528, hashtext(scope)). A scope
--    whose lock another claimer holds is skipped this round (the claim gives it capacity 0), so
--    claimers never wait on each other and never deadlock. Unlimited scopes take no lock.
-- 3. Planner settings for the claim statement, local to this transaction (see below).
-- This statement's view of the policies may predate a change it waited for in step 1; the
-- claim statement reads them afresh and gives any limited scope not locked here capacity 0.
-- 4. The keys to visit (tasks with a concurrency key): for each type, a skip scan of
--    tasks_claim_key_idx from the key after the claimer's cursor for that type, one index
--    descent per key, wrapping round to the first key; keys with a task due now, at most the
--    batch plus the type's running keyed tasks (keys that may be full) plus a few per claim. Keys take turns
--    this way, so a key with a long backlog never holds back the keys after it. Which tasks
--    of these keys start is decided by the claim statement, from its own snapshot.
-- Returns rows by `kind`: the guard (null scope), one `lock` row per limited scope (`locked`;
-- `rated`: it has a rate limit), one `type` row per walked type (`roomy`), one `key` row per
-- key with a task due now (`walk_key`, in `walk_pos` order), one `end` row per type (the last
-- key visited, due or not).
-- $1 types, $2 and $3 the claimer's cursors (a type, the last key it served), $4 batch.
WITH RECURSIVE cur AS (
    SELECT t.task_type, coalesce(c.after, '') AS after,
           least($4::int + 8 + (
               SELECT count(*) FROM tasks r
               WHERE r.status IN ('running', 'cancel_requested') AND r.task_type = t.task_type
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
                     WHERE r.status IN ('running', 'cancel_requested')
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
                     AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = c.task_type AND t.status IN ('queued', 'retry_wait')
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
                     AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = w.task_type AND t.status IN ('queued', 'retry_wait')
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
                     AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = c.task_type AND t.status IN ('queued', 'retry_wait')
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
                     AND t.status IN ('queued', 'retry_wait') AND t.available_at <= now()) AS due
        FROM (SELECT t.concurrency_key AS k FROM tasks t
              WHERE t.task_type = w.task_type AND t.status IN ('queued', 'retry_wait')
                AND t.concurrency_key > w.k
              ORDER BY t.concurrency_key LIMIT 1) x
    ) nx
    WHERE w.n < w.budget AND w.d < w.max_d AND nx.k <= w.after
)
SELECT NULL::text AS scope,
       (SELECT pg_advisory_xact_lock_shared(19529, 0)) IS NOT NULL
       -- The claim must walk tasks_claim_idx in claim order and stop after the batch. Right
       -- after a bulk enqueue the statistics are stale and the planner would rather bitmap-scan
       -- and sort the whole queue; for this transaction only, take those plans off the table.
       AND set_config('enable_bitmapscan', 'off', true) = 'off'
       AND set_config('enable_seqscan', 'off', true) = 'off'
       -- Every join of the claim is of a few hundred rows against tasks by primary key: only
       -- index nested loops. A generic plan cannot know the batch size and would otherwise
       -- merge- or hash-join the chosen rows against a scan of the whole primary key.
       AND set_config('enable_hashjoin', 'off', true) = 'off'
       AND set_config('enable_mergejoin', 'off', true) = 'off'
       -- Those disabled plans carry a huge nominal cost, which would otherwise trigger JIT
       -- compilation (hundreds of milliseconds) for a statement that runs in one.
       AND set_config('jit', 'off', true) = 'off'
       -- Plan it once per connection: the generic plan is checked to walk the claim index, and
       -- planning this statement costs as much as running it.
       AND set_config('plan_cache_mode', 'force_generic_plan', true) = 'force_generic_plan'
       -- The claim commits like every other write, with the server's synchronous_commit (the
       -- store never turns it off): it is on disk before its holder starts the handler. A
       -- claim lost in a crash would hand its epoch out again (two executions under one fencing
       -- token and one idempotency key), and a handler's side effects wait for no later write.
       AS locked,
       NULL::boolean AS rated, 'guard' AS kind, NULL::text AS walk_key, NULL::int AS walk_pos,
       NULL::boolean AS roomy
UNION ALL
SELECT scope, pg_try_advisory_xact_lock(19528, hashtext(scope)) AS locked, rated, 'lock', NULL,
       NULL, NULL
FROM (
    SELECT scope, rate_starts IS NOT NULL AS rated FROM policies
    WHERE (max_concurrency IS NOT NULL OR rate_starts IS NOT NULL OR per_key_concurrency IS NOT NULL
           OR breaker_state = 'half_open')
      AND (scope = '*' OR scope = ANY($1::text[]))
    ORDER BY scope
) limited
UNION ALL
SELECT task_type, NULL, NULL, 'type', NULL, NULL, roomy FROM room
UNION ALL
SELECT task_type, NULL, NULL, 'key', k, d, NULL FROM fwd WHERE due
UNION ALL
SELECT task_type, NULL, NULL, 'key', k, 1000000 + d, NULL FROM back WHERE due
UNION ALL
-- The last key visited, due or not: where the round goes on when nothing due was found.
SELECT task_type, NULL, NULL, 'end', k, pos, NULL
FROM (SELECT DISTINCT ON (task_type) task_type, k, pos
      FROM (SELECT task_type, k, d AS pos FROM fwd
            UNION ALL SELECT task_type, k, 1000000 + d FROM back) v
      ORDER BY task_type, pos DESC) e
