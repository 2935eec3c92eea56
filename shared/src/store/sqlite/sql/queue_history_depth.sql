-- The queue's depth now by type: waiting (queued, retry_wait) and running (running,
-- cancel_requested).
SELECT task_type,
       sum(status IN ('queued', 'retry_wait')) AS waiting,
       sum(status IN ('running', 'cancel_requested')) AS running
FROM tasks
WHERE status IN ('queued', 'retry_wait', 'running', 'cancel_requested')
GROUP BY task_type
