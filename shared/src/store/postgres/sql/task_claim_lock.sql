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
--    descent per key, wrapping round to the first key; at most the batch plus the type's
--    running keyed tasks (keys that may be full) plus a few keys per claim. Keys take turns
--    this way, so a key with a long backlog never holds back the keys after it. Which tasks
--    of these keys start is decided by the claim statement, from its own snapshot.
-- Returns one row with a null scope (the guard), then one row per limited scope (`rated`: it
-- has a rate limit), then one row per key visited (`walk_key`, in `walk_pos` order).
-- $1 types, $2 and $3 the claimer's cursors (a type, the last key it served), $4 batch.
WITH RECURSIVE cur AS (
    SELECT t.task_type, coalesce(c.after, '') AS after,
           least($4::int + 8 + (
               SELECT count(*) FROM tasks r
               WHERE r.status IN ('running', 'cancel_requested') AND r.task_type = t.task_type
                 AND r.concurrency_key IS NOT NULL)::int, 1000) AS budget
    FROM unnest($1::text[]) AS t(task_type)
    LEFT JOIN unnest($2::text[], $3::text[]) AS c(task_type, after) ON c.task_type = t.task_type
),
-- From the cursor to the last key.
fwd(task_type, k, n, budget) AS (
    SELECT c.task_type, f.k, 1, c.budget
    FROM cur c
    CROSS JOIN LATERAL (
        SELECT t.concurrency_key AS k FROM tasks t
        WHERE t.task_type = c.task_type AND t.status IN ('queued', 'retry_wait')
          AND t.concurrency_key > c.after
        ORDER BY t.concurrency_key LIMIT 1
    ) f
    UNION ALL
    SELECT w.task_type, nx.k, w.n + 1, w.budget
    FROM fwd w
    CROSS JOIN LATERAL (
        SELECT t.concurrency_key AS k FROM tasks t
        WHERE t.task_type = w.task_type AND t.status IN ('queued', 'retry_wait')
          AND t.concurrency_key > w.k
        ORDER BY t.concurrency_key LIMIT 1
    ) nx
    WHERE w.n < w.budget
),
-- Round again from the first key up to the cursor's, with what is left of the budget.
back(task_type, k, n, budget, after) AS (
    SELECT c.task_type, f.k, 1, c.left_, c.after
    FROM (SELECT c.*,
                 c.budget - coalesce((SELECT max(w.n) FROM fwd w WHERE w.task_type = c.task_type), 0)::int
                     AS left_
          FROM cur c) c
    CROSS JOIN LATERAL (
        SELECT t.concurrency_key AS k FROM tasks t
        WHERE t.task_type = c.task_type AND t.status IN ('queued', 'retry_wait')
          AND t.concurrency_key > ''
        ORDER BY t.concurrency_key LIMIT 1
    ) f
    WHERE c.after <> '' AND c.left_ > 0 AND f.k <= c.after
    UNION ALL
    SELECT w.task_type, nx.k, w.n + 1, w.budget, w.after
    FROM back w
    CROSS JOIN LATERAL (
        SELECT t.concurrency_key AS k FROM tasks t
        WHERE t.task_type = w.task_type AND t.status IN ('queued', 'retry_wait')
          AND t.concurrency_key > w.k
        ORDER BY t.concurrency_key LIMIT 1
    ) nx
    WHERE w.n < w.budget AND nx.k <= w.after
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
       NULL::boolean AS rated, NULL::text AS walk_key, NULL::int AS walk_pos
UNION ALL
SELECT scope, pg_try_advisory_xact_lock(19528, hashtext(scope)) AS locked, rated, NULL, NULL
FROM (
    SELECT scope, rate_starts IS NOT NULL AS rated FROM policies
    WHERE (max_concurrency IS NOT NULL OR rate_starts IS NOT NULL OR per_key_concurrency IS NOT NULL
           OR breaker_state = 'half_open')
      AND (scope = '*' OR scope = ANY($1::text[]))
    ORDER BY scope
) limited
UNION ALL
SELECT task_type, NULL, NULL, k, n FROM fwd
UNION ALL
SELECT task_type, NULL, NULL, k, 1000000 + n FROM back
