-- Operator requeue of finished task $1: back to queued, due now, with a fresh set of attempts.
-- The fencing epoch keeps growing (the next claim bumps it); the last error is kept as history.
WITH cur AS (
    SELECT id, status FROM tasks WHERE id = $1 FOR UPDATE
),
upd AS (
    UPDATE tasks t
    SET status = 'queued', attempt = 0, available_at = now(), lease_until = NULL, heartbeat_at = NULL,
        started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, updated_at = now()
    FROM cur
    WHERE t.id = cur.id AND cur.status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
    RETURNING t.id
)
SELECT cur.status AS before, EXISTS (SELECT 1 FROM upd) AS changed FROM cur
