-- Operator requeue of finished task $1: back to queued, due now, with a fresh set of attempts
-- and snoozes (the checkpoint is kept: the next attempt resumes from it).
-- The fencing epoch keeps growing (the next claim bumps it); the last error is kept as history.
-- A finished task's last attempt lives in its own row (final_outcome); it is written out to
-- task_attempt_rows before the row is reset, so the requeued task keeps its whole history.
WITH cur AS (
    SELECT id, done_on, status FROM tasks WHERE id = $1 FOR UPDATE
),
kept AS (
    INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome, error)
    SELECT t.id, t.lease_epoch, t.attempt, t.lease_owner, t.started_at, t.finished_at, t.final_outcome,
           CASE WHEN t.final_outcome = 'failed' THEN t.last_error END
    FROM tasks t JOIN cur ON cur.id = t.id AND cur.done_on = t.done_on
    WHERE t.final_outcome IS NOT NULL
      AND cur.status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
),
upd AS (
    UPDATE tasks t
    SET status = 'queued', attempt = 0, available_at = now(), lease_until = NULL, heartbeat_at = NULL,
        started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, snoozes = 0, final_outcome = NULL,
        done_on = 'infinity', updated_at = now()
    FROM cur
    WHERE t.id = cur.id AND t.done_on = cur.done_on AND cur.status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
    RETURNING t.id
)
SELECT cur.status AS before, EXISTS (SELECT 1 FROM upd) AS changed FROM cur
