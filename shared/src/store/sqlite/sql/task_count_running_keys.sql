-- Running tasks (running, cancel_requested) per concurrency key of the types ?1 (JSON array),
-- for the per-key limits of a claim.
SELECT task_type, concurrency_key, count(*) AS n FROM tasks
WHERE status IN ('running', 'cancel_requested') AND concurrency_key IS NOT NULL
  AND task_type IN (SELECT value FROM json_each(?1))
GROUP BY task_type, concurrency_key
