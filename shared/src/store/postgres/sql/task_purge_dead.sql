-- Operator purge of the dead-letter queue: delete every dead task matching $1 type, $2 error
-- code, $3 died at or after, $4 died before (null = any); returns how many. Through the parent
-- `tasks`, so every partition a dead task lies in (its day's, tasks_done_kept,
-- tasks_done_default) is searched, and the statement trigger tasks_delete_attempts deletes the
-- deleted tasks' task_attempt_rows (a finished task's last attempt lives in its own row and goes
-- with it). A row another transaction moved out of a partition while this waited on it fails
-- with SQLSTATE 40001; the store runs the transaction again.
WITH gone AS (
    DELETE FROM tasks t
    WHERE t.status = 'dead'
      AND ($1::text IS NULL OR t.task_type = $1)
      AND ($2::text IS NULL OR t.last_error ->> 'code' = $2)
      AND ($3::timestamptz IS NULL OR t.finished_at >= $3)
      AND ($4::timestamptz IS NULL OR t.finished_at < $4)
    RETURNING t.id
)
SELECT count(*) AS count FROM gone
