-- Claim up to $3 due tasks of types $2 for owner $1 with a lease of $4 seconds, when some type
-- has a waiting keyed task (task_claim.sql otherwise: the same statement without the keys).
-- $5: the limited scopes whose advisory locks this transaction holds (task_claim_lock.sql).
-- $6, $7: the concurrency keys to visit (type, key), in the order the lock statement walked
-- them. Keyless tasks come from tasks_claim_idx as always; each visited key offers its first
-- due tasks (claim order), at most its per-key limit minus its running tasks and at most its
-- share of the batch. Among equal priorities the first task of every key (a keyless task is a
-- key of its own) comes before the second of any, so keys share the batch.
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
                SELECT count(*) FROM tasks r WHERE r.done_on = 'infinity' AND r.status IN ('running', 'cancel_requested')), 0)
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
walked AS (
    SELECT w.task_type, w.concurrency_key, w.pos
    FROM unnest($6::text[], $7::text[]) WITH ORDINALITY AS w(task_type, concurrency_key, pos)
),
-- What each visited key may still start: its per-key limit minus its running tasks (the batch
-- without a limit), nothing when the type's lock is not ours.
key_room AS (
    SELECT w.task_type, w.concurrency_key, w.pos,
           CASE WHEN p.per_key_concurrency IS NULL THEN $3::bigint
                -- A per-key limit is exact only under the type's lock.
                WHEN NOT (w.task_type = ANY($5::text[])) THEN 0
                ELSE greatest(p.per_key_concurrency - (
                    SELECT count(*) FROM tasks r
                    WHERE r.done_on = 'infinity' AND r.status IN ('running', 'cancel_requested')
                      AND r.task_type = w.task_type
                      AND r.concurrency_key = w.concurrency_key), 0)
           END AS room
    FROM walked w
    JOIN type_cap tc ON tc.task_type = w.task_type AND (tc.cap IS NULL OR tc.cap > 0)
    LEFT JOIN pol p ON p.scope = w.task_type
),
-- Each key with room offers at most its share of the batch among the keys with room.
key_caps AS (
    SELECT r.task_type, r.concurrency_key, r.pos,
           least(r.room, ceil($3::numeric / count(*) OVER (PARTITION BY r.task_type))::bigint) AS cap
    FROM key_room r
    WHERE r.room > 0
),
offered AS (
    SELECT h.id, h.task_type, h.priority, h.available_at, k.pos,
           row_number() OVER (PARTITION BY k.task_type, k.concurrency_key
                              ORDER BY h.priority DESC, h.available_at, h.id) AS key_rank,
           max(h.priority) OVER (PARTITION BY k.task_type, k.concurrency_key) AS top
    FROM key_caps k
    CROSS JOIN LATERAL (
        SELECT c.id, c.task_type, c.priority, c.available_at
        FROM tasks c
        WHERE c.task_type = k.task_type AND c.concurrency_key = k.concurrency_key
          AND c.done_on = 'infinity' AND c.status IN ('queued', 'retry_wait')
          AND c.available_at <= now()
          AND (c.deadline_at IS NULL OR c.deadline_at > now())
        ORDER BY c.priority DESC, c.available_at, c.id
        LIMIT k.cap
        FOR UPDATE SKIP LOCKED
    ) h
    WHERE k.cap > 0
),
-- Of each type, as many keys as the batch: those whose first task has the highest priority,
-- among equals the first in the round. The walk visits a few more keys than the batch in case
-- some have nothing due, and the keys it visited but did not need come first next round.
keyed AS (
    SELECT o.id, o.task_type, o.priority, o.available_at, o.key_rank, o.pos
    FROM (SELECT o.*, dense_rank() OVER (PARTITION BY o.task_type ORDER BY o.top DESC, o.pos) AS key_ord
          FROM offered o) o
    WHERE o.key_ord <= $3
),
-- Without a type cap and with the global cap at or above the batch, every candidate is taken
-- as it is: the ranking below (a sort, a window and a join per batch) runs only when a cap
-- can cut the batch. The branch not taken is skipped by a one-time filter.
uncapped AS (
    SELECT NOT EXISTS (SELECT 1 FROM type_cap WHERE cap IS NOT NULL)
           AND (SELECT cap FROM global_cap) >= $3::bigint
           AND cardinality($6::text[]) = 0 AS yes
),
-- Among equal priorities: the first task of every key before the second of any (a keyless
-- task is a key of its own), and within a rank the keys in round order interleaved with the
-- keyless tasks in claim order — so a cap that cuts the batch still takes keys in turn.
ranked AS (
    SELECT c.id, c.task_type, c.priority, c.available_at, c.key_rank, c.pos,
           row_number() OVER (PARTITION BY c.task_type
                              ORDER BY c.priority DESC, c.key_rank, c.pos, c.available_at, c.id)
               AS type_rank
    FROM (
        SELECT id, task_type, priority, available_at, 1::bigint AS key_rank,
               row_number() OVER (ORDER BY priority DESC, available_at, id) AS pos
        FROM candidates
        UNION ALL
        SELECT id, task_type, priority, available_at, key_rank, pos FROM keyed
    ) c
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
        ORDER BY priority DESC, key_rank, pos, available_at, id
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
