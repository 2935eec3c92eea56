-- The status of task ?1, for an operator requeue.
SELECT status FROM tasks WHERE id = ?1
