-- End attempts, one per input row: ($1 ids, $2 owners, $3 epochs, $4 outcomes: succeeded |
-- partially_succeeded | failed | cancelled, $5 results, $6 errors with their retryable flag).
-- Fenced per row: a row whose key no longer matches a leased task changes nothing and comes
-- back with kind 'fenced'. A repeat of an outcome already recorded for the same (task, epoch,
-- owner) comes back 'repeated' and changes nothing. A failure is retried with the type's
-- backoff, min(max, base * mult^(attempt-1)) +/- jitter in database time, while attempts are
-- left, the error is retryable and the retry would start before the deadline; else dead.
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::jsonb[], $6::jsonb[])
        AS i(id, owner, epoch, outcome, result, error)
),
cur AS (
    SELECT t.id, t.task_type, t.status, t.attempt, t.max_attempts, t.started_at, t.deadline_at,
           i.owner, i.epoch, i.outcome, i.result, i.error
    FROM tasks t
    JOIN input i ON t.id = i.id AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch
    WHERE t.status IN ('running', 'cancel_requested')
    ORDER BY t.id
    FOR UPDATE OF t
),
decision AS (
    SELECT cur.id,
           CASE
               WHEN cur.outcome IN ('succeeded', 'partially_succeeded', 'cancelled') THEN cur.outcome
               WHEN cur.status = 'cancel_requested' THEN 'cancelled'
               WHEN coalesce((cur.error ->> 'retryable')::boolean, false)
                    AND cur.attempt < cur.max_attempts
                    AND (cur.deadline_at IS NULL OR timing.retry_at < cur.deadline_at) THEN 'retry_wait'
               ELSE 'dead'
           END AS next_status,
           timing.retry_at
    FROM cur
    CROSS JOIN LATERAL (
        SELECT now() + make_interval(secs =>
                   least(coalesce(tp.retry_max_ms, g.retry_max_ms)::double precision,
                         coalesce(tp.retry_base_ms, g.retry_base_ms)::double precision
                         * power(coalesce(tp.retry_multiplier, g.retry_multiplier), greatest(cur.attempt - 1, 0)))
                   * (1 + coalesce(tp.retry_jitter, g.retry_jitter) * (2 * random() - 1)) / 1000.0) AS retry_at
        FROM policies g
        LEFT JOIN policies tp ON tp.scope = cur.task_type
        WHERE g.scope = '*'
    ) timing
),
upd AS (
    UPDATE tasks t
    SET status = d.next_status,
        available_at = CASE WHEN d.next_status = 'retry_wait' THEN d.retry_at ELSE t.available_at END,
        lease_until = NULL,
        result = CASE WHEN cur.outcome IN ('succeeded', 'partially_succeeded') THEN cur.result ELSE t.result END,
        last_error = CASE WHEN cur.outcome = 'failed' THEN cur.error ELSE t.last_error END,
        finished_at = CASE WHEN d.next_status = 'retry_wait' THEN NULL ELSE now() END,
        updated_at = now()
    FROM decision d
    JOIN cur ON cur.id = d.id
    WHERE t.id = d.id
    RETURNING t.id, t.status, t.available_at
),
attempt_row AS (
    INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, outcome, error)
    SELECT cur.id, cur.epoch, cur.attempt, cur.owner, coalesce(cur.started_at, now()), cur.outcome,
           CASE WHEN cur.outcome = 'failed' THEN cur.error END
    FROM cur
)
SELECT i.id,
       CASE WHEN u.id IS NOT NULL THEN 'applied' WHEN a.task_id IS NOT NULL THEN 'repeated' ELSE 'fenced' END AS kind,
       coalesce(u.status, t.status) AS status,
       CASE WHEN u.status = 'retry_wait' THEN u.available_at END AS retry_at
FROM input i
LEFT JOIN upd u ON u.id = i.id
LEFT JOIN task_attempts a ON u.id IS NULL AND a.task_id = i.id AND a.epoch = i.epoch AND a.agent = i.owner
                          AND a.outcome = i.outcome
LEFT JOIN tasks t ON t.id = i.id
