-- End attempts, one per input row: ($1 ids, $2 owners, $3 epochs, $4 outcomes: succeeded |
-- partially_succeeded | failed | cancelled, $5 results, $6 errors with their retryable flag).
-- Returns one row per attempt it ended ('applied'); an input row that does not come back
-- changed nothing: its key no longer matches a leased task (fenced), or the same outcome of
-- the same (task, epoch, owner) was recorded before (a repeat) — the caller tells the two
-- apart with task_attempt_outcomes.sql in a new statement, which also sees a completion that
-- committed while this one waited on its row.
-- A failure is retried with the type's backoff, min(max, base * mult^(attempt-1)) +/- jitter
-- in database time, while attempts are left, the error is retryable and the retry would start
-- before the deadline; else dead (deadline_exceeded when only the deadline stood in the way).
-- One pass over the rows: each is found once by primary key, decided and updated, in id order
-- (the input is sorted and the planner may only use nested loops here), as lease_renew_many
-- locks them, so a completion and a renewal of the same leases never deadlock. The decision
-- reads the row the UPDATE is about to change: when another transaction changed it first, the
-- UPDATE re-checks the fence on the newest version and decides from that one, so a cancel
-- request that landed meanwhile is honoured and a recovery that took the row fences it. Only
-- failures look up the retry policy (a one-time filter skips it for every other row).
-- Every SET column is assigned, so its domain check runs on what is written: the new result
-- or error, or the value kept (usually null, then free).
-- The status test is wrapped in CASE on purpose: written plainly it matches the predicate of
-- tasks_leased_type_idx, and with statistics taken when few tasks ran the planner would scan
-- that whole partial index (dead entries included) instead of looking the ids up by primary key.
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::jsonb[], $6::jsonb[])
        AS i(id, owner, epoch, outcome, result, error)
    ORDER BY 1
),
upd AS (
    UPDATE tasks t
    SET (status, available_at, last_error, finished_at) = (
            SELECT d.status,
                   CASE WHEN d.status = 'retry_wait' THEN d.retry_at ELSE t.available_at END,
                   CASE WHEN i.outcome = 'failed' THEN d.error ELSE t.last_error END,
                   CASE WHEN d.status = 'retry_wait' THEN NULL ELSE now() END
            FROM (
                SELECT CASE
                           WHEN i.outcome IN ('succeeded', 'partially_succeeded', 'cancelled') THEN i.outcome
                           WHEN t.status = 'cancel_requested' THEN 'cancelled'
                           WHEN retry.wanted AND retry.at < coalesce(t.deadline_at, 'infinity') THEN 'retry_wait'
                           ELSE 'dead'
                       END AS status,
                       retry.at AS retry_at,
                       CASE
                           WHEN i.outcome = 'failed' AND t.status = 'running' AND retry.wanted
                                AND retry.at >= coalesce(t.deadline_at, 'infinity')
                           THEN jsonb_build_object(
                               'code', 'deadline_exceeded',
                               'message', format('the retry due at %s would start after the deadline %s; last error %s: %s',
                                                 retry.at, t.deadline_at, i.error ->> 'code', i.error ->> 'message'),
                               'retryable', false)
                           ELSE i.error
                       END AS error
                FROM (SELECT 1) one
                LEFT JOIN LATERAL (
                    SELECT coalesce((i.error ->> 'retryable')::boolean, false)
                               AND t.attempt < t.max_attempts AS wanted,
                           now() + make_interval(secs => delay.ms * (1 + delay.jitter * (2 * random() - 1)) / 1000.0) AS at
                    FROM (
                        SELECT CASE
                                   WHEN p.max_ms <= p.base_ms OR p.base_ms <= 0 THEN least(p.max_ms, p.base_ms)
                                   WHEN greatest(t.attempt - 1, 0) * ln(p.mult) >= ln(p.max_ms / p.base_ms) THEN p.max_ms
                                   ELSE p.base_ms * power(p.mult, greatest(t.attempt - 1, 0))
                               END AS ms,
                               p.jitter
                        FROM (
                            SELECT coalesce(tp.retry_base_ms, g.retry_base_ms)::double precision AS base_ms,
                                   coalesce(tp.retry_multiplier, g.retry_multiplier) AS mult,
                                   coalesce(tp.retry_max_ms, g.retry_max_ms)::double precision AS max_ms,
                                   coalesce(tp.retry_jitter, g.retry_jitter) AS jitter
                            FROM policies g
                            LEFT JOIN policies tp ON tp.scope = t.task_type
                            WHERE g.scope = '*'
                        ) p
                    ) delay
                    WHERE i.outcome = 'failed'
                ) retry ON true
            ) d
        ),
        lease_until = NULL,
        result = CASE WHEN i.outcome IN ('succeeded', 'partially_succeeded') THEN i.result ELSE t.result END,
        updated_at = now()
    FROM input i
    WHERE t.id = i.id AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch
      AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    RETURNING t.id, t.status, t.available_at, t.lease_epoch, t.attempt, t.lease_owner, t.started_at,
              t.last_error, i.outcome
),
attempt_row AS (
    INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, outcome, error)
    SELECT u.id, u.lease_epoch, u.attempt, u.lease_owner, coalesce(u.started_at, now()), u.outcome,
           CASE WHEN u.outcome = 'failed' THEN u.last_error END
    FROM upd u
)
SELECT u.id, u.status, CASE WHEN u.status = 'retry_wait' THEN u.available_at END AS retry_at
FROM upd u
