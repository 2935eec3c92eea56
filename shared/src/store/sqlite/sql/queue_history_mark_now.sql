-- The highest task id now (tasks.id is AUTOINCREMENT: never reused, so every task created
-- later has a higher one). Read under the write lock.
SELECT coalesce(max(id), 0) AS id_mark FROM tasks
