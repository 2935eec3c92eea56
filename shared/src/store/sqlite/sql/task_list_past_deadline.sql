-- Up to ?2 waiting tasks whose deadline passed by now ?1, earliest deadline first.
SELECT id, deadline_at FROM tasks
WHERE deadline_at IS NOT NULL AND deadline_at <= ?1 AND status IN ('queued', 'retry_wait')
ORDER BY deadline_at LIMIT ?2
