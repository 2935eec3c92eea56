-- Records the task a trigger enqueued (?2) for schedule ?1 at now ?3.
UPDATE schedules SET last_task_id = ?2, last_error = NULL, updated_at = ?3 WHERE name = ?1
