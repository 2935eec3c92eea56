-- The facts that explain why task ?1 is not running (worded in store/explain.rs). No row: no
-- such task. ?2 now, ?3 the cutoff before which an agent's registry heartbeat is stale, ?4 most
-- claimable tasks counted ahead of it.
WITH t AS (
    SELECT id, task_type, status, priority, available_at, deadline_at, attempt, max_attempts,
           lease_owner, last_error, coalesce(finished_at, updated_at) AS finished_at,
           concurrency_key, status IN ('queued', 'retry_wait') AS waiting
    FROM tasks WHERE id = ?1),
-- The rate-limit ledgers of the task's type and the global scope within their windows ending
-- now, each start with the starts up to it (oldest first) and the window's total: the start
-- whose leaving lets one more in is the oldest whose running total reaches used - limit + 1.
led AS (
    SELECT r.scope, r.at,
           sum(r.n) OVER (PARTITION BY r.scope ORDER BY r.at ROWS UNBOUNDED PRECEDING) AS cum,
           sum(r.n) OVER (PARTITION BY r.scope) AS used
    FROM rate_limit_starts r JOIN policies p ON p.scope = r.scope
    WHERE p.rate_starts IS NOT NULL AND r.at > ?2 - p.rate_period_ms * 1000
      AND (r.scope = '*' OR r.scope = (SELECT task_type FROM t)))
SELECT t.id, t.task_type, t.status, t.available_at, t.deadline_at, t.attempt, t.max_attempts,
       t.lease_owner, t.last_error, t.finished_at,
       coalesce(tp.paused, 0) AS type_paused,
       coalesce(gp.paused, 0) AS global_paused,
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
       CASE WHEN t.waiting AND tp.rate_starts IS NOT NULL THEN (
           SELECT max(l.used) FROM led l WHERE l.scope = tp.scope)
       END AS type_rate_used,
       CASE WHEN t.waiting AND tp.rate_starts IS NOT NULL THEN (
           SELECT min(l.at) FROM led l
           WHERE l.scope = tp.scope AND l.cum >= l.used - tp.rate_starts + 1)
       END AS type_rate_frees_at,
       gp.rate_starts AS global_rate_starts, gp.rate_period_ms AS global_rate_period_ms,
       CASE WHEN t.waiting AND gp.rate_starts IS NOT NULL THEN (
           SELECT max(l.used) FROM led l WHERE l.scope = '*')
       END AS global_rate_used,
       CASE WHEN t.waiting AND gp.rate_starts IS NOT NULL THEN (
           SELECT min(l.at) FROM led l
           WHERE l.scope = '*' AND l.cum >= l.used - gp.rate_starts + 1)
       END AS global_rate_frees_at,
       t.waiting AND EXISTS (
           SELECT 1 FROM agents a, json_each(a.task_types) j
           WHERE a.state = 'running' AND a.heartbeat_at > ?3 AND j.value = t.task_type)
           AS agent_live,
       -- Keyless tasks queue with the keyless ones, a keyed task behind its key's.
       CASE WHEN t.waiting AND t.available_at <= ?2 AND t.concurrency_key IS NULL THEN (
           SELECT count(*) FROM (
               SELECT 1 FROM tasks c
               WHERE c.status IN ('queued', 'retry_wait')
                 AND c.task_type = t.task_type AND c.concurrency_key IS NULL
                 AND c.available_at <= ?2
                 AND (c.deadline_at IS NULL OR c.deadline_at > ?2)
                 AND c.priority >= t.priority
                 AND (c.priority > t.priority
                      OR c.available_at < t.available_at
                      OR (c.available_at = t.available_at AND c.id < t.id))
               LIMIT ?4))
       WHEN t.waiting AND t.available_at <= ?2 THEN (
           SELECT count(*) FROM (
               SELECT 1 FROM tasks c
               WHERE c.status IN ('queued', 'retry_wait')
                 AND c.task_type = t.task_type AND c.concurrency_key = t.concurrency_key
                 AND c.available_at <= ?2
                 AND (c.deadline_at IS NULL OR c.deadline_at > ?2)
                 AND c.priority >= t.priority
                 AND (c.priority > t.priority
                      OR c.available_at < t.available_at
                      OR (c.available_at = t.available_at AND c.id < t.id))
               LIMIT ?4))
       ELSE 0 END AS ahead
FROM t
LEFT JOIN policies tp ON tp.scope = t.task_type
LEFT JOIN policies gp ON gp.scope = '*'
