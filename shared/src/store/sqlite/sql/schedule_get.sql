-- One schedule by name (?1), with the status of its last task.
SELECT s.*, t.status AS last_task_status FROM schedules s
LEFT JOIN tasks t ON t.id = s.last_task_id
WHERE s.name = ?1
