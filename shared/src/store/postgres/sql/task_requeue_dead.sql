-- Requeue every dead task matching: $1 type, $2 error code, $3 died at or after, $4 died before
-- (null = any). Returns how many.
WITH upd AS (
    UPDATE tasks
    SET status = 'queued', attempt = 0, available_at = now(), lease_until = NULL, heartbeat_at = NULL,
        started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, updated_at = now()
    WHERE status = 'dead'
      AND ($1::text IS NULL OR task_type = $1)
      AND ($2::text IS NULL OR last_error ->> 'code' = $2)
      AND ($3::timestamptz IS NULL OR finished_at >= $3)
      AND ($4::timestamptz IS NULL OR finished_at < $4)
    RETURNING id
)
SELECT count(*) AS count FROM upd
