-- Deletes every task of type ?1, whatever its status (its attempts go with it). For tools that
-- own a type of their own, like the bench.
DELETE FROM tasks WHERE task_type = ?1
