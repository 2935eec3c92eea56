-- Operator requeue of finished task ?2: back to queued, due at now ?1, with a fresh set of
-- attempts. The fencing epoch keeps growing (the next claim bumps it); the last error is kept
-- as history.
UPDATE tasks SET status = 'queued', attempt = 0, available_at = ?1, lease_until = NULL,
    heartbeat_at = NULL, started_at = NULL, finished_at = NULL, result = NULL, progress = NULL,
    updated_at = ?1
WHERE id = ?2
