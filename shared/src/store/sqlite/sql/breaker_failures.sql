-- Failed attempts of type ?1 that ended after ?2 (µs), for a closed breaker's count.
SELECT count(*) FROM task_attempts a JOIN tasks t ON t.id = a.task_id
WHERE a.outcome = 'failed' AND a.finished_at > ?2 AND t.task_type = ?1
