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
-- 4. Which of the types have a waiting task with a concurrency key (their keys are walked next,
--    by task_key_walk.sql). Keys take turns
--    this way, so a key with a long backlog never holds back the keys after it. Which tasks
--    of these keys start is decided by the claim statement, from its own snapshot.
-- Returns rows by `kind`: the guard (null scope), one `lock` row per limited scope (`locked`;
-- `rated`: it has a rate limit), one `keyed` row per type with a waiting keyed task.
-- $1 types.
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
       NULL::boolean AS rated, 'guard' AS kind
UNION ALL
SELECT scope, pg_try_advisory_xact_lock(19528, hashtext(scope)) AS locked, rated, 'lock'
FROM (
    SELECT scope, rate_starts IS NOT NULL AS rated FROM policies
    WHERE (max_concurrency IS NOT NULL OR rate_starts IS NOT NULL OR per_key_concurrency IS NOT NULL
           OR breaker_state = 'half_open')
      AND (scope = '*' OR scope = ANY($1::text[]))
    ORDER BY scope
) limited
UNION ALL
-- The types with a waiting keyed task (one index descent each): only then does the claim walk
-- their keys (task_key_walk.sql), so a claim of keyless work pays nothing more.
SELECT t.task_type, NULL, NULL, 'keyed'
FROM unnest($1::text[]) AS t(task_type)
WHERE EXISTS (SELECT 1 FROM tasks k
              WHERE k.done_on = 'infinity' AND k.task_type = t.task_type AND k.status IN ('queued', 'retry_wait')
                AND k.concurrency_key IS NOT NULL)
