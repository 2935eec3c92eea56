-- The dead-letter queue page: task_list.sql with the status as a constant, so every plan
-- (plans are generic) walks tasks_dead_idx backwards from the cursor instead of the whole table.
-- $1 statuses (always {dead}); the rest is task_list_page.sql.
SELECT t.*, now() AS db_now FROM tasks t
WHERE t.status = 'dead' AND t.status = ANY($1::text[])
