-- The queue's depth now by type: waiting (queued, retry_wait) and running (running,
-- cancel_requested), and the available time of the longest-due waiting task.
SELECT task_type,
       sum(status IN ('queued', 'retry_wait')) AS waiting,
       sum(status IN ('running', 'cancel_requested')) AS running,
       min(CASE WHEN status IN ('queued', 'retry_wait') THEN available_at END) AS oldest_waiting_at
FROM tasks
WHERE status IN ('queued', 'retry_wait', 'running', 'cancel_requested')
GROUP BY task_type
