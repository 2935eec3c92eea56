-- The facts that explain why task $1 is not running (the messages are worded in Rust,
-- store/explain.rs). No row: no such task. $2 seconds after which an agent's registry heartbeat
-- is stale; $3 most claimable tasks counted ahead of it (the cap plus one, so "more than" shows).
-- Limits, agents and the queue ahead are read only for waiting tasks; the count ahead only for a
-- due one, and it stops at $3 rows. Database time throughout.
WITH t AS (
    SELECT id, task_type, status, priority, available_at, deadline_at, attempt, max_attempts,
           lease_owner, last_error, coalesce(finished_at, updated_at) AS finished_at,
           concurrency_key, status IN ('queued', 'retry_wait') AS waiting
    FROM tasks
    WHERE id = $1
)
SELECT t.id, t.task_type, t.status, t.available_at, t.deadline_at, t.attempt, t.max_attempts,
       t.lease_owner, t.last_error, t.finished_at, now() AS db_now,
       coalesce(tp.paused, false) AS type_paused,
       coalesce(gp.paused, false) AS global_paused,
       tp.max_concurrency AS type_limit,
       CASE WHEN t.waiting AND (tp.max_concurrency IS NOT NULL OR tp.breaker_state = 'half_open') THEN (
           SELECT count(*) FROM tasks r
           WHERE r.status IN ('running', 'cancel_requested') AND r.task_type = t.task_type)
       END AS type_running,
       t.concurrency_key,
       tp.breaker_failures, tp.breaker_within_ms, tp.breaker_cooldown_ms,
       coalesce(tp.breaker_state, 'closed') AS breaker_state, tp.breaker_since, tp.breaker_until,
       CASE WHEN t.concurrency_key IS NOT NULL THEN tp.per_key_concurrency END AS key_limit,
       CASE WHEN t.waiting AND tp.per_key_concurrency IS NOT NULL AND t.concurrency_key IS NOT NULL THEN (
           SELECT count(*) FROM tasks r
           WHERE r.status IN ('running', 'cancel_requested') AND r.task_type = t.task_type
             AND r.concurrency_key = t.concurrency_key)
       END AS key_running,
       gp.max_concurrency AS global_limit,
       CASE WHEN t.waiting AND gp.max_concurrency IS NOT NULL THEN (
           SELECT count(*) FROM tasks r WHERE r.status IN ('running', 'cancel_requested'))
       END AS global_running,
       tp.rate_starts AS type_rate_starts, tp.rate_period_ms AS type_rate_period_ms,
       tr.used AS type_rate_used, tr.frees_at AS type_rate_frees_at,
       gp.rate_starts AS global_rate_starts, gp.rate_period_ms AS global_rate_period_ms,
       gr.used AS global_rate_used, gr.frees_at AS global_rate_frees_at,
       t.waiting AND EXISTS (
           SELECT 1 FROM agents a
           WHERE a.state = 'running'
             AND a.heartbeat_at > now() - make_interval(secs => $2)
             AND t.task_type = ANY(a.task_types)) AS agent_live,
       -- Keyless tasks queue with the keyless ones, a keyed task behind its key's.
       CASE WHEN t.waiting AND t.available_at <= now() AND t.concurrency_key IS NULL THEN (
           SELECT count(*) FROM (
               SELECT 1 FROM tasks c
               WHERE c.status IN ('queued', 'retry_wait')
                 AND c.task_type = t.task_type AND c.concurrency_key IS NULL
                 AND c.available_at <= now()
                 AND (c.deadline_at IS NULL OR c.deadline_at > now())
                 -- Claim order is priority DESC, available_at, id: the first condition bounds the
                 -- walk of tasks_claim_idx, the second is the exact "comes before".
                 AND c.priority >= t.priority
                 AND (c.priority > t.priority
                      OR (c.available_at, c.id) < (t.available_at, t.id))
               LIMIT $3
           ) ahead)
       WHEN t.waiting AND t.available_at <= now() THEN (
           SELECT count(*) FROM (
               SELECT 1 FROM tasks c
               WHERE c.status IN ('queued', 'retry_wait')
                 AND c.task_type = t.task_type AND c.concurrency_key = t.concurrency_key
                 AND c.available_at <= now()
                 AND (c.deadline_at IS NULL OR c.deadline_at > now())
                 -- The same order within the key (tasks_claim_key_idx).
                 AND c.priority >= t.priority
                 AND (c.priority > t.priority
                      OR (c.available_at, c.id) < (t.available_at, t.id))
               LIMIT $3
           ) ahead)
       ELSE 0 END AS ahead
FROM t
LEFT JOIN policies tp ON tp.scope = t.task_type
LEFT JOIN policies gp ON gp.scope = '*'
-- The starts in each rate limit's window ending now, and the start whose leaving the window lets
-- one more in: the oldest at which the starts so far (oldest first) reach used - limit + 1
-- (waiting tasks only; null when the window is not full).
LEFT JOIN LATERAL (
    SELECT max(w.used) AS used, min(w.at) FILTER (WHERE w.cum >= w.used - tp.rate_starts + 1) AS frees_at
    FROM (
        SELECT r.at, sum(r.n) OVER (ORDER BY r.at ROWS UNBOUNDED PRECEDING) AS cum,
               sum(r.n) OVER () AS used
        FROM rate_limit_starts r
        WHERE t.waiting AND r.scope = tp.scope
          AND r.at > now() - make_interval(secs => tp.rate_period_ms / 1000.0)
    ) w
) tr ON tp.rate_starts IS NOT NULL
LEFT JOIN LATERAL (
    SELECT max(w.used) AS used, min(w.at) FILTER (WHERE w.cum >= w.used - gp.rate_starts + 1) AS frees_at
    FROM (
        SELECT r.at, sum(r.n) OVER (ORDER BY r.at ROWS UNBOUNDED PRECEDING) AS cum,
               sum(r.n) OVER () AS used
        FROM rate_limit_starts r
        WHERE t.waiting AND r.scope = '*'
          AND r.at > now() - make_interval(secs => gp.rate_period_ms / 1000.0)
    ) w
) gr ON gp.rate_starts IS NOT NULL
