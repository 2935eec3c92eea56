-- Locks one schedule ($1) for the change that follows in the same transaction.
SELECT s.*, NULL::text AS last_task_status
FROM schedules s
WHERE s.name = $1
FOR UPDATE
