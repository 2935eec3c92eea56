-- Claim up to $3 due tasks of types $2 for owner $1 with a lease of $4 seconds, when none of
-- the types has a waiting keyed task (else task_claim_keyed.sql, the same statement with the
-- visited keys' tasks added: kept apart so this one's plan stays small — a claim pays for
-- initialising every node of its plan, run or not).
-- $5: the limited scopes whose advisory locks this transaction holds (task_claim_lock.sql).
-- A limited scope not in $5 (locked by another claimer, or limited after the lock statement)
-- gets nothing this round, so no interleaving of claimers can exceed a limit. Running counts
-- and rate-limit ledgers are read after the locks were taken, so they include every committed
-- claim of the scope.
-- Lease times use statement_timestamp(): database time at this statement, after the locks.
-- A rate limit of N per P leaves N minus the starts its ledger (rate_limit_starts) holds
-- within (now - P, now]; the caller writes the starts taken here to the ledger in the same
-- transaction (rate_limit_stamp.sql), so a claim without rate limits writes nothing more.
WITH pol AS (
    SELECT scope, max_concurrency, paused, rate_starts, rate_period_ms, per_key_concurrency,
           breaker_state, breaker_since FROM policies
    WHERE scope = '*' OR scope = ANY($2::text[])
),
-- Starts each locked rate-limited scope may still make in the window ending now (no rows, and
-- no ledger read, without rate limits).
rate AS (
    SELECT p.scope, p.rate_period_ms,
           greatest(p.rate_starts - coalesce((
               SELECT sum(r.n) FROM rate_limit_starts r
               WHERE r.scope = p.scope
                 AND r.at > statement_timestamp() - make_interval(secs => p.rate_period_ms / 1000.0)
           ), 0), 0) AS left_
    FROM pol p
    WHERE p.rate_starts IS NOT NULL AND p.scope = ANY($5::text[])
),
global_cap AS (
    SELECT CASE
        WHEN coalesce(g.paused, false) THEN 0
        WHEN g.max_concurrency IS NULL AND g.rate_starts IS NULL THEN $3::bigint
        WHEN NOT ('*' = ANY($5::text[])) THEN 0
        ELSE least($3::bigint,
            CASE WHEN g.max_concurrency IS NOT NULL THEN greatest(g.max_concurrency - (
                SELECT count(*) FROM tasks r WHERE r.done_on = 'infinity'
                    AND r.status IN ('running', 'cancel_requested')), 0)
            END,
            (SELECT left_ FROM rate WHERE scope = '*'))
    END AS cap
    FROM (SELECT 1) one LEFT JOIN pol g ON g.scope = '*'
),
-- A half-open breaker lets one task of its type try, until the leader's next tick moves it
-- (a try that was released or lost leaves room for another); an open one none (the type is
-- left out, as a paused one is).
type_cap AS (
    SELECT t.task_type,
           CASE
               WHEN p.max_concurrency IS NULL AND p.rate_starts IS NULL
                    AND p.breaker_state IS DISTINCT FROM 'half_open' THEN NULL
               WHEN NOT (t.task_type = ANY($5::text[])) THEN 0
               ELSE least(
                   CASE WHEN p.max_concurrency IS NOT NULL OR p.breaker_state = 'half_open' THEN
                       greatest(CASE WHEN p.breaker_state = 'half_open'
                                     THEN least(1, coalesce(p.max_concurrency, 1))
                                     ELSE p.max_concurrency END - (
                           SELECT count(*) FROM tasks r
                           WHERE r.done_on = 'infinity' AND r.status IN ('running', 'cancel_requested')
                             AND r.task_type = t.task_type)
                         - CASE WHEN p.breaker_state = 'half_open'
                           -- Tries since it half-opened that ended, well or badly.
                           THEN leasehold_half_open_ended(t.task_type, p.breaker_since)
                           ELSE 0 END, 0)
                   END,
                   (SELECT left_ FROM rate WHERE scope = t.task_type))
           END AS cap
    FROM unnest($2::text[]) AS t(task_type)
    LEFT JOIN pol p ON p.scope = t.task_type
    WHERE NOT coalesce(p.paused, false) AND p.breaker_state IS DISTINCT FROM 'open'
),
open_types AS (
    SELECT array_agg(task_type) AS types FROM type_cap WHERE cap IS NULL OR cap > 0
),
candidates AS (
    SELECT id, task_type, priority, available_at
    FROM tasks
    WHERE done_on = 'infinity' AND status IN ('queued', 'retry_wait')
      AND available_at <= now()
      AND (deadline_at IS NULL OR deadline_at > now())
      AND task_type = ANY((SELECT types FROM open_types)::text[])
      AND concurrency_key IS NULL
    ORDER BY priority DESC, available_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
-- Without a type cap and with the global cap at or above the batch, every candidate is taken
-- as it is: the ranking below (a sort, a window and a join per batch) runs only when a cap
-- can cut the batch. The branch not taken is skipped by a one-time filter.
uncapped AS (
    SELECT NOT EXISTS (SELECT 1 FROM type_cap WHERE cap IS NOT NULL)
           AND (SELECT cap FROM global_cap) >= $3::bigint AS yes
),
ranked AS (
    SELECT c.id, c.task_type, c.priority, c.available_at,
           row_number() OVER (PARTITION BY c.task_type ORDER BY c.priority DESC, c.available_at, c.id) AS type_rank
    FROM candidates c
),
within_type AS (
    SELECT r.* FROM ranked r JOIN type_cap tc ON tc.task_type = r.task_type
    WHERE tc.cap IS NULL OR r.type_rank <= tc.cap
),
chosen AS (
    SELECT id FROM candidates WHERE (SELECT yes FROM uncapped)
    UNION ALL
    SELECT id FROM (
        SELECT id FROM within_type
        ORDER BY priority DESC, available_at, id
        LIMIT (SELECT cap FROM global_cap)
    ) capped
    WHERE NOT (SELECT yes FROM uncapped)
)
UPDATE tasks t
SET status = 'running',
    lease_owner = $1,
    lease_epoch = t.lease_epoch + 1,
    lease_until = statement_timestamp() + make_interval(secs => $4),
    heartbeat_at = statement_timestamp(),
    attempt = t.attempt + 1,
    started_at = statement_timestamp(),
    progress = NULL,
    updated_at = statement_timestamp()
FROM chosen
WHERE t.id = chosen.id AND t.done_on = 'infinity'
-- The columns this statement just set to known values (status, owner, the three times that are
-- statement_timestamp(), progress) are not sent back: the caller fills them in from db_now.
-- The caller reads these columns by position (rows.rs, claimed_task): keep the order.
RETURNING t.id, t.task_type, t.payload, t.priority, t.available_at, t.deadline_at, t.timeout_ms,
          t.attempt, t.max_attempts, t.lease_epoch, t.lease_until, t.idempotency_key, t.result,
          t.last_error, t.created_at, t.finished_at, statement_timestamp() AS db_now,
          -- The rate-limited scopes whose caps this claim applied (null: none), which the
          -- caller stamps with these starts (rate_limit_stamp.sql). Read here, not from the
          -- lock statement, whose view of the policies may predate a change it waited for.
          (SELECT array_agg(scope) FROM rate) AS rated,
          t.concurrency_key, t.snoozes, t.checkpoint, t.checkpoint_at
