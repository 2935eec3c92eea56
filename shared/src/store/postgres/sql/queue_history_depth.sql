-- The queue's depth now by type: waiting (queued, retry_wait) and running (running,
-- cancel_requested), one branch per partial index of tasks_live, as task_overview.sql reads it;
-- and the available time of the longest-due waiting task (task_dead_letter_unserved.sql reads it).
SELECT task_type,
       count(*) FILTER (WHERE status IN ('queued', 'retry_wait')) AS waiting,
       count(*) FILTER (WHERE status IN ('running', 'cancel_requested')) AS running,
       min(available_at) FILTER (WHERE status IN ('queued', 'retry_wait')) AS oldest_waiting_at
FROM (
    SELECT task_type, status, available_at FROM tasks
    WHERE done_on = 'infinity' AND status IN ('queued', 'retry_wait') AND concurrency_key IS NULL
    UNION ALL
    SELECT task_type, status, available_at FROM tasks
    WHERE done_on = 'infinity' AND status IN ('queued', 'retry_wait') AND concurrency_key IS NOT NULL
    UNION ALL
    SELECT task_type, status, available_at FROM tasks
    WHERE done_on = 'infinity' AND status IN ('running', 'cancel_requested')
) w
GROUP BY task_type
