-- Tasks of types ?2 (JSON array) that a claim could take at now ?1: waiting, due, within their
-- deadline, and of a type that is not paused (globally or by type). Used by `--exit-when-idle`.
SELECT count(*) FROM tasks t
WHERE t.status IN ('queued', 'retry_wait') AND t.available_at <= ?1
  AND (t.deadline_at IS NULL OR t.deadline_at > ?1)
  AND t.task_type IN (SELECT value FROM json_each(?2))
  AND NOT EXISTS (SELECT 1 FROM policies p
                  WHERE p.paused AND (p.scope = '*' OR p.scope = t.task_type))
