-- Operator requeue of finished task ?2: back to queued, due at now ?1, with a fresh set of
-- attempts and snoozes (the checkpoint is kept: the next attempt resumes from it). The
-- fencing epoch keeps growing (the next claim bumps it); the last error is kept as history.
UPDATE tasks SET status = 'queued', attempt = 0, available_at = ?1, lease_until = NULL,
    heartbeat_at = NULL, started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, snoozes = 0,
    updated_at = ?1
WHERE id = ?2
