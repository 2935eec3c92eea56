-- End attempts, one per input row: ($1 ids, $2 owners, $3 epochs, $4 outcomes: succeeded |
-- partially_succeeded | failed | cancelled, $5 results, $6 errors with their retryable flag).
-- Fenced per row: a row whose key no longer matches a leased task changes nothing and comes
-- back with kind 'fenced'. A repeat of an outcome already recorded for the same (task, epoch,
-- owner) comes back 'repeated' and changes nothing. A failure is retried with the type's
-- backoff, min(max, base * mult^(attempt-1)) +/- jitter in database time, while attempts are
-- left, the error is retryable and the retry would start before the deadline; else dead
-- (deadline_exceeded when only the deadline stood in the way).
-- Rows are locked in id order (as lease_renew_many does), so a completion and a renewal of
-- the same agent's leases can never deadlock. The UPDATE re-checks the fence as well, and the
-- attempt row is written only for rows the UPDATE changed.
-- A repeat racing the original (waiting on its row lock) cannot see the original's attempt row
-- in this statement's snapshot and comes back 'fenced'; the caller re-checks those rows with
-- task_attempt_outcomes.sql in a new statement.
-- The status test is wrapped in CASE on purpose: written plainly it matches the predicate of
-- tasks_leased_type_idx, and with statistics taken when few tasks ran the planner would scan
-- that whole partial index (dead entries included) instead of looking the ids up by primary key.
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::jsonb[], $6::jsonb[])
        AS i(id, owner, epoch, outcome, result, error)
),
cur AS (
    SELECT t.id, t.task_type, t.status, t.attempt, t.max_attempts, t.started_at, t.deadline_at,
           i.owner, i.epoch, i.outcome, i.result, i.error
    FROM tasks t
    JOIN input i ON t.id = i.id AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch
    WHERE CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    ORDER BY t.id
    FOR UPDATE OF t
),
decision AS (
    SELECT cur.id, cur.owner, cur.epoch, cur.outcome, cur.result,
           CASE
               WHEN cur.outcome IN ('succeeded', 'partially_succeeded', 'cancelled') THEN cur.outcome
               WHEN cur.status = 'cancel_requested' THEN 'cancelled'
               WHEN retry.wanted AND retry.at < coalesce(cur.deadline_at, 'infinity') THEN 'retry_wait'
               ELSE 'dead'
           END AS next_status,
           retry.at AS retry_at,
           -- A retry that would start after the deadline ends the task as deadline_exceeded.
           CASE
               WHEN cur.outcome = 'failed' AND cur.status = 'running' AND retry.wanted
                    AND retry.at >= coalesce(cur.deadline_at, 'infinity')
               THEN jsonb_build_object(
                   'code', 'deadline_exceeded',
                   'message', format('the retry due at %s would start after the deadline %s; last error %s: %s',
                                     retry.at, cur.deadline_at, cur.error ->> 'code', cur.error ->> 'message'),
                   'retryable', false)
               ELSE cur.error
           END AS error
    FROM cur
    -- Only failures need the retry policy: for other rows the lateral returns nothing (a
    -- one-time filter, so no policy lookup at all) and retry is NULL.
    LEFT JOIN LATERAL (
        SELECT cur.outcome = 'failed'
                   AND coalesce((cur.error ->> 'retryable')::boolean, false)
                   AND cur.attempt < cur.max_attempts AS wanted,
               now() + make_interval(secs => delay.ms * (1 + delay.jitter * (2 * random() - 1)) / 1000.0) AS at
        FROM (
            -- min(max, base * mult^(attempt-1)) without overflowing for large attempts: when the
            -- power would pass max, the answer is max (compared in logarithms).
            SELECT CASE
                       WHEN cur.outcome <> 'failed' THEN 0
                       WHEN p.max_ms <= p.base_ms OR p.base_ms <= 0 THEN least(p.max_ms, p.base_ms)
                       WHEN greatest(cur.attempt - 1, 0) * ln(p.mult) >= ln(p.max_ms / p.base_ms) THEN p.max_ms
                       ELSE p.base_ms * power(p.mult, greatest(cur.attempt - 1, 0))
                   END AS ms,
                   p.jitter
            FROM (
                SELECT coalesce(tp.retry_base_ms, g.retry_base_ms)::double precision AS base_ms,
                       coalesce(tp.retry_multiplier, g.retry_multiplier) AS mult,
                       coalesce(tp.retry_max_ms, g.retry_max_ms)::double precision AS max_ms,
                       coalesce(tp.retry_jitter, g.retry_jitter) AS jitter
                FROM policies g
                LEFT JOIN policies tp ON tp.scope = cur.task_type
                WHERE g.scope = '*' AND cur.outcome = 'failed'
            ) p
        ) delay
    ) retry ON true
),
upd AS (
    UPDATE tasks t
    SET status = CASE WHEN t.status = 'cancel_requested' AND d.outcome = 'failed' THEN 'cancelled'
                      ELSE d.next_status END,
        available_at = CASE WHEN d.next_status = 'retry_wait' AND t.status = 'running' THEN d.retry_at
                            ELSE t.available_at END,
        lease_until = NULL,
        result = CASE WHEN d.outcome IN ('succeeded', 'partially_succeeded') THEN d.result ELSE t.result END,
        last_error = CASE WHEN d.outcome = 'failed' THEN d.error ELSE t.last_error END,
        finished_at = CASE WHEN d.next_status = 'retry_wait' AND t.status = 'running' THEN NULL ELSE now() END,
        updated_at = now()
    FROM decision d
    WHERE t.id = d.id AND t.lease_owner = d.owner AND t.lease_epoch = d.epoch
      AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    RETURNING t.id, t.status, t.available_at, t.lease_epoch, t.attempt, t.lease_owner, t.started_at,
              d.outcome, d.error
),
attempt_row AS (
    INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, outcome, error)
    SELECT u.id, u.lease_epoch, u.attempt, u.lease_owner, coalesce(u.started_at, now()), u.outcome,
           CASE WHEN u.outcome = 'failed' THEN u.error END
    FROM upd u
)
-- Applied rows come straight from the update; only the others are looked up (by index), so
-- the statement stays linear in the batch size.
SELECT u.id, 'applied' AS kind, u.status, CASE WHEN u.status = 'retry_wait' THEN u.available_at END AS retry_at
FROM upd u
UNION ALL
SELECT i.id,
       CASE WHEN a.task_id IS NOT NULL THEN 'repeated' ELSE 'fenced' END AS kind,
       t.status,
       NULL::timestamptz AS retry_at
FROM input i
LEFT JOIN task_attempts a ON a.task_id = i.id AND a.epoch = i.epoch AND a.agent = i.owner AND a.outcome = i.outcome
LEFT JOIN tasks t ON t.id = i.id
WHERE i.id <> ALL (ARRAY(SELECT id FROM upd))
