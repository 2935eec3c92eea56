-- The status and lease (owner, epoch) of task ?1, for an operator cancel.
SELECT status, lease_owner, lease_epoch FROM tasks WHERE id = ?1
