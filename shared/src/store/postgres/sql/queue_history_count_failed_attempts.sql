-- Attempts that failed in [$1, $2) and that their task outlived (retried, or dead-lettered by
-- another path) by type and minute, through task_attempt_rows_failed_idx; the task's type by
-- its primary key.
SELECT t.task_type, date_bin(interval '1 minute', a.finished_at, timestamptz '2000-01-01 00:00:00+00') AS minute, count(*) AS n
FROM task_attempt_rows a
JOIN tasks t ON t.id = a.task_id
WHERE a.outcome = 'failed' AND a.finished_at >= $1 AND a.finished_at < $2
GROUP BY 1, 2
