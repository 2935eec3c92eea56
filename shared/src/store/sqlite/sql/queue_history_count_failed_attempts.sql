-- Attempts that failed in [?1, ?2) (every one: SQLite keeps a row per attempt) by type and
-- minute, through task_attempts_failed_idx; the task's type by its primary key.
SELECT t.task_type, (a.finished_at / 60000000) * 60000000 AS minute, count(*) AS n
FROM task_attempts a
JOIN tasks t ON t.id = a.task_id
WHERE a.outcome = 'failed' AND a.finished_at >= ?1 AND a.finished_at < ?2
GROUP BY 1, 2
