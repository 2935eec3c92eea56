-- For each type whose breaker is half-open: how many tries started since it half-opened have
-- ended, well or badly. No parameters.
SELECT p.scope, (
           SELECT count(*) FROM task_attempts a JOIN tasks t ON t.id = a.task_id
           WHERE t.task_type = p.scope AND a.started_at >= p.breaker_since
             AND a.finished_at >= p.breaker_since
             AND a.outcome IN ('succeeded', 'partially_succeeded', 'failed')) AS tried
FROM policies p WHERE p.breaker_state = 'half_open'
