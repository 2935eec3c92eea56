-- The rows a batch of completions decides on: tasks ?1 (JSON array of ids).
SELECT id, task_type, status, lease_owner, lease_epoch, attempt, max_attempts,
       deadline_at, started_at, result, last_error, snoozes
FROM tasks WHERE id IN (SELECT value FROM json_each(?1))
