-- The status and type of task ?1, for an operator delete.
SELECT status, task_type FROM tasks WHERE id = ?1
