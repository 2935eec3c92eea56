-- Operator delete of task $1 (locked first, task_lock.sql) when no agent holds it: any status
-- but running and cancel_requested. Through the parent `tasks`, so whichever partition holds it;
-- the statement trigger tasks_delete_attempts deletes its task_attempt_rows. Returns its status
-- and type before, and whether it was deleted.
WITH cur AS (
    SELECT id, done_on, status, task_type FROM tasks WHERE id = $1
),
gone AS (
    DELETE FROM tasks t USING cur
    WHERE t.id = cur.id AND t.done_on = cur.done_on
      AND cur.status NOT IN ('running', 'cancel_requested')
    RETURNING t.id
)
SELECT cur.status AS before, cur.task_type, EXISTS (SELECT 1 FROM gone) AS changed FROM cur
