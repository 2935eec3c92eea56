-- Task ?1, every column.
SELECT * FROM tasks WHERE id = ?1
