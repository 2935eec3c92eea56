-- Every schedule by name, with the status of its last task (NULL when none or deleted).
SELECT s.*, t.status AS last_task_status FROM schedules s
LEFT JOIN tasks t ON t.id = s.last_task_id
ORDER BY s.name
