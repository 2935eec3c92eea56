-- Counts per task type plus the global policy as the row named '*' (no task type can be named
-- so). ?1 now, ?2 a minute ago, ?3 caps the rows. oldest_waiting_ms: how long (ms) the type's
-- oldest task a claim could take now (queued or retry_wait, due) has been due; NULL when none.
WITH live AS (
    SELECT task_type,
           sum(status = 'queued' AND available_at <= ?1) AS queued,
           sum(status = 'queued' AND available_at > ?1) AS scheduled,
           sum(status = 'retry_wait') AS retrying,
           sum(status IN ('running', 'cancel_requested')) AS running,
           min(CASE WHEN status IN ('queued', 'retry_wait') AND available_at <= ?1
                    THEN available_at END) AS oldest_due
    FROM tasks WHERE status IN ('queued', 'retry_wait', 'running', 'cancel_requested')
    GROUP BY task_type
), dead AS (
    SELECT task_type, count(*) AS dead FROM tasks WHERE status = 'dead' GROUP BY task_type
), recent AS (
    SELECT task_type,
           sum(status IN ('succeeded', 'partially_succeeded')) AS finished,
           sum(status = 'dead') AS died,
           sum(status = 'cancelled' AND json_extract(last_error, '$.code') = 'shed') AS shed
    FROM tasks
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
      AND finished_at >= ?2
    GROUP BY task_type
), names AS (
    SELECT task_type FROM live UNION SELECT task_type FROM dead
    UNION SELECT task_type FROM recent UNION SELECT scope FROM policies
)
SELECT n.task_type,
       coalesce(l.queued, 0) AS queued, coalesce(l.scheduled, 0) AS scheduled,
       coalesce(l.retrying, 0) AS retrying, coalesce(l.running, 0) AS running,
       coalesce(d.dead, 0) AS dead, coalesce(r.finished, 0) AS finished_last_minute,
       coalesce(r.died, 0) AS dead_last_minute, coalesce(r.shed, 0) AS shed_last_minute,
       (?1 - l.oldest_due) / 1000 AS oldest_waiting_ms,
       p.max_concurrency, p.shed_after_ms, p.per_key_concurrency,
       p.breaker_failures, p.breaker_within_ms, p.breaker_cooldown_ms,
       coalesce(p.breaker_state, 'closed') AS breaker_state, p.breaker_since, p.breaker_until,
       coalesce(p.paused, 0) AS paused, p.rate_starts, p.rate_period_ms,
       CASE WHEN p.rate_starts IS NOT NULL THEN (
           SELECT coalesce(sum(s.n), 0) FROM rate_limit_starts s
           WHERE s.scope = n.task_type AND s.at > ?1 - p.rate_period_ms * 1000)
       END AS rate_used
FROM names n
LEFT JOIN live l ON l.task_type = n.task_type
LEFT JOIN dead d ON d.task_type = n.task_type
LEFT JOIN recent r ON r.task_type = n.task_type
LEFT JOIN policies p ON p.scope = n.task_type
ORDER BY n.task_type = '*' DESC, n.task_type
LIMIT ?3
