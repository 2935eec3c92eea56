-- Moves the circuit breakers (the leader's maintenance tick; the caller audits each move in the
-- same transaction). No parameters. Database time throughout.
--   closed    → open       the failed attempts of the type that ended within the window (and
--                          after the breaker last closed) reach breaker_failures;
--   open      → half_open  the cooldown has passed;
--   half_open → closed     an attempt started since it half-opened succeeded (and none started
--                          since still runs);
--   half_open → open       one failed (a failure wins over a success in the same tick).
-- Failures are read from task_attempt_rows_failed_idx (retried failures) and tasks_failed_idx
-- (final ones), which hold failures only. Rows are locked; a concurrent policy change waits.
-- Returns one row per move.
WITH b AS (
    SELECT scope, breaker_failures, breaker_within_ms, breaker_cooldown_ms, breaker_state,
           breaker_since, breaker_until,
           greatest(now() - make_interval(secs => breaker_within_ms / 1000.0),
                    coalesce(breaker_since, '-infinity')) AS window_start
    FROM policies
    WHERE breaker_failures IS NOT NULL AND scope <> '*'
    FOR UPDATE
),
counted AS (
    SELECT b.*,
           CASE WHEN b.breaker_state = 'closed' THEN (
               SELECT count(*) FROM task_attempt_rows a JOIN tasks t ON t.id = a.task_id
               WHERE a.outcome = 'failed' AND a.finished_at > b.window_start
                 AND t.task_type = b.scope
           ) + (
               SELECT count(*) FROM tasks t
               WHERE t.final_outcome = 'failed' AND t.task_type = b.scope
                 AND t.finished_at > b.window_start
           ) END AS failures,
           b.breaker_state = 'half_open' AND (
               EXISTS (
                   SELECT 1 FROM task_attempt_rows a JOIN tasks t ON t.id = a.task_id
                   WHERE a.outcome = 'failed' AND a.finished_at >= b.breaker_since
                     AND a.started_at >= b.breaker_since AND t.task_type = b.scope)
               OR EXISTS (
                   SELECT 1 FROM tasks t
                   WHERE t.final_outcome = 'failed' AND t.task_type = b.scope
                     AND t.finished_at >= b.breaker_since AND t.started_at >= b.breaker_since)
           ) AS probe_failed,
           b.breaker_state = 'half_open' AND EXISTS (
               SELECT 1 FROM tasks t
               WHERE t.status IN ('succeeded', 'partially_succeeded')
                 AND t.finished_at >= b.breaker_since AND t.started_at >= b.breaker_since
                 AND t.task_type = b.scope
           -- Not while a later try still runs: its failure, committed after this snapshot,
           -- would end before the breaker closed and never be counted.
           ) AND NOT EXISTS (
               SELECT 1 FROM tasks r
               WHERE r.status IN ('running', 'cancel_requested') AND r.task_type = b.scope
                 AND r.started_at >= b.breaker_since
           ) AS probe_ok
    FROM b
),
moves AS (
    SELECT scope, breaker_state AS from_state, failures, breaker_failures, breaker_within_ms,
           breaker_cooldown_ms,
           CASE
               WHEN breaker_state = 'closed' AND failures >= breaker_failures THEN 'open'
               WHEN breaker_state = 'open' AND breaker_until <= now() THEN 'half_open'
               WHEN breaker_state = 'half_open' AND probe_failed THEN 'open'
               WHEN breaker_state = 'half_open' AND probe_ok THEN 'closed'
           END AS to_state
    FROM counted
),
moved AS (
    UPDATE policies p
    SET breaker_state = m.to_state,
        breaker_since = now(),
        breaker_until = CASE WHEN m.to_state = 'open'
                             THEN now() + make_interval(secs => m.breaker_cooldown_ms / 1000.0) END
    FROM moves m
    WHERE p.scope = m.scope AND m.to_state IS NOT NULL
    RETURNING p.scope, m.from_state, m.to_state, m.failures, p.breaker_until,
              m.breaker_failures, m.breaker_within_ms, m.breaker_cooldown_ms
)
SELECT scope, from_state, to_state, failures, breaker_until, breaker_failures, breaker_within_ms,
       breaker_cooldown_ms
FROM moved
ORDER BY scope
