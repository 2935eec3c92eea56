-- Requeue every dead task matching: $1 type, $2 error code, $3 died at or after, $4 died before
-- (null = any). Returns how many. Its dry run is task_match_dead.sql.
-- A finished task's last attempt lives in its own row (final_outcome); it is written out to
-- task_attempt_rows before the row is reset, so the requeued task keeps its whole history.
-- The UPDATE's RETURNING gives the row as it was (a self-join on the old version), so the
-- final attempt is written from the values the reset overwrites.
WITH upd AS (
    UPDATE tasks t
    SET status = 'queued', attempt = 0, available_at = now(), lease_until = NULL, heartbeat_at = NULL,
        started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, snoozes = 0, final_outcome = NULL,
        done_on = 'infinity', updated_at = now()
    FROM tasks old
    WHERE old.id = t.id AND old.done_on = t.done_on
      AND t.status = 'dead'
      AND ($1::text IS NULL OR t.task_type = $1)
      AND ($2::text IS NULL OR t.last_error ->> 'code' = $2)
      AND ($3::timestamptz IS NULL OR t.finished_at >= $3)
      AND ($4::timestamptz IS NULL OR t.finished_at < $4)
    RETURNING t.id, old.lease_epoch, old.attempt, old.lease_owner, old.started_at, old.finished_at,
              old.final_outcome, old.last_error
),
kept AS (
    INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, finished_at, outcome, error)
    SELECT id, lease_epoch, attempt, lease_owner, started_at, finished_at, final_outcome,
           CASE WHEN final_outcome = 'failed' THEN last_error END
    FROM upd
    WHERE final_outcome IS NOT NULL
)
SELECT count(*) AS count FROM upd
