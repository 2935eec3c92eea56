-- Running tasks (running, cancel_requested) per type, for the concurrency limits of a claim.
-- No parameters.
SELECT task_type, count(*) AS n FROM tasks
WHERE status IN ('running', 'cancel_requested') GROUP BY task_type
