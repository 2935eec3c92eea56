-- Operator delete of task ?1 when no agent holds it (any status but running and
-- cancel_requested); its attempts go with it (trigger tasks_delete_attempts).
DELETE FROM tasks WHERE id = ?1 AND status NOT IN ('running', 'cancel_requested')
