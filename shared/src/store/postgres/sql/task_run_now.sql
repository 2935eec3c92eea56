-- Operator run-now of task $1 (locked first, task_lock.sql): a waiting task that is not yet due
-- (queued with a run_at or a delay, or waiting to retry) becomes due at the database's now, and
-- the claim takes it in its turn (priority, limits, pauses and breakers still apply). Returns
-- its status and whether it moved: a task already due, or not waiting, is left as it is.
WITH cur AS (
    SELECT id, done_on, status, available_at FROM tasks WHERE id = $1
),
upd AS (
    UPDATE tasks t SET available_at = now(), updated_at = now()
    FROM cur
    WHERE t.id = cur.id AND t.done_on = cur.done_on
      AND cur.status IN ('queued', 'retry_wait') AND cur.available_at > now()
    RETURNING t.id
)
SELECT cur.status AS before, EXISTS (SELECT 1 FROM upd) AS changed FROM cur
