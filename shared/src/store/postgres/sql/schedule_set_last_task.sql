-- Records the task a trigger enqueued ($2) for schedule $1.
UPDATE schedules SET last_task_id = $2, last_error = NULL, updated_at = now() WHERE name = $1
