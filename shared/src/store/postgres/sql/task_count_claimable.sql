-- Tasks of types $1 that a claim could take now: waiting, due, within their deadline, and of a
-- type that is not paused (globally or by type). Used by `--exit-when-idle`.
SELECT count(*) AS n
FROM tasks t
WHERE t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
  AND t.available_at <= now()
  AND (t.deadline_at IS NULL OR t.deadline_at > now())
  AND t.task_type = ANY($1::text[])
  AND NOT EXISTS (
      SELECT 1 FROM policies p
      WHERE p.paused AND (p.scope = '*' OR p.scope = t.task_type))
