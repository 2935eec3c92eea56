-- How the tries of type ?1 started since ?2 (µs, when its breaker half-opened) ended: whether one
-- failed, whether one succeeded (and none started since still runs).
SELECT EXISTS (SELECT 1 FROM task_attempts a JOIN tasks t ON t.id = a.task_id
               WHERE a.outcome = 'failed' AND a.finished_at >= ?2 AND a.started_at >= ?2
                 AND t.task_type = ?1) AS failed,
       EXISTS (SELECT 1 FROM task_attempts a JOIN tasks t ON t.id = a.task_id
               WHERE a.outcome IN ('succeeded', 'partially_succeeded')
                 AND a.finished_at >= ?2 AND a.started_at >= ?2 AND t.task_type = ?1)
       -- Not while a later try still runs (its failure would go uncounted).
       AND NOT EXISTS (SELECT 1 FROM tasks r
                       WHERE r.status IN ('running', 'cancel_requested') AND r.task_type = ?1
                         AND r.started_at >= ?2) AS ok
