-- Counts per task type for the console's header and Types view, plus the global policy as the
-- row named '*' (no task type can be named so). Live tasks are counted from the statuses the
-- claim and lease indexes cover, dead ones from the dead-letter index, the last minute's
-- finishes from the finished index: no scan of the finished history. $1 caps the rows.
-- oldest_waiting_ms: how long (ms) the type's oldest task a claim could take now has been due
-- (queued or retry_wait with available_at <= now(), as the claim statements select); NULL
-- when none waits. It comes from the rows the claim indexes already yield, at no extra read.
WITH live AS (
    SELECT task_type,
           count(*) FILTER (WHERE status = 'queued' AND available_at <= now()) AS queued,
           count(*) FILTER (WHERE status = 'queued' AND available_at > now()) AS scheduled,
           count(*) FILTER (WHERE status = 'retry_wait') AS retrying,
           count(*) FILTER (WHERE status IN ('running', 'cancel_requested')) AS running,
           -- The oldest waiting task: due and not running, what a claim could take now.
           min(available_at) FILTER (WHERE status IN ('queued', 'retry_wait')
                                       AND available_at <= now()) AS oldest_due
    -- One branch per index: keyless waiting, keyed waiting, leased.
    FROM (
        SELECT task_type, status, available_at FROM tasks
        WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL
        UNION ALL
        SELECT task_type, status, available_at FROM tasks
        WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NOT NULL
        UNION ALL
        SELECT task_type, status, available_at FROM tasks
        WHERE status IN ('running', 'cancel_requested')
    ) w
    GROUP BY task_type
), dead AS (
    SELECT task_type, count(*) AS dead FROM tasks WHERE status = 'dead' GROUP BY task_type
), recent AS (
    SELECT task_type,
           count(*) FILTER (WHERE status IN ('succeeded', 'partially_succeeded')) AS finished,
           count(*) FILTER (WHERE status = 'dead') AS died,
           count(*) FILTER (WHERE status = 'cancelled' AND last_error->>'code' = 'shed') AS shed
    FROM tasks
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
      AND finished_at >= now() - interval '60 seconds'
    GROUP BY task_type
), names AS (
    SELECT task_type FROM live
    UNION SELECT task_type FROM dead
    UNION SELECT task_type FROM recent
    UNION SELECT scope FROM policies
)
SELECT n.task_type,
       coalesce(l.queued, 0) AS queued,
       coalesce(l.scheduled, 0) AS scheduled,
       coalesce(l.retrying, 0) AS retrying,
       coalesce(l.running, 0) AS running,
       coalesce(d.dead, 0) AS dead,
       coalesce(r.finished, 0) AS finished_last_minute,
       coalesce(r.died, 0) AS dead_last_minute,
       coalesce(r.shed, 0) AS shed_last_minute,
       (extract(epoch FROM now() - l.oldest_due) * 1000)::bigint AS oldest_waiting_ms,
       p.max_concurrency,
       coalesce(p.paused, false) AS paused,
       p.rate_starts, p.rate_period_ms, p.shed_after_ms, p.per_key_concurrency,
       p.breaker_failures, p.breaker_within_ms, p.breaker_cooldown_ms,
       coalesce(p.breaker_state, 'closed') AS breaker_state, p.breaker_since, p.breaker_until,
       CASE WHEN p.rate_starts IS NOT NULL THEN (
           SELECT coalesce(sum(s.n), 0) FROM rate_limit_starts s
           WHERE s.scope = n.task_type
             AND s.at > now() - make_interval(secs => p.rate_period_ms / 1000.0))
       END AS rate_used,
       now() AS db_now
FROM names n
LEFT JOIN live l ON l.task_type = n.task_type
LEFT JOIN dead d ON d.task_type = n.task_type
LEFT JOIN recent r ON r.task_type = n.task_type
LEFT JOIN policies p ON p.scope = n.task_type
ORDER BY n.task_type = '*' DESC, n.task_type
LIMIT $1
