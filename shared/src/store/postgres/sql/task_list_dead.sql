-- The dead-letter queue page: task_list.sql with the status as a constant, so every plan
-- (plans are generic) walks tasks_dead_idx backwards from the cursor instead of the whole table.
-- $1 statuses (always {dead}), $2 type, $3 text, $4 ids below, $5 page size.
SELECT t.*, now() AS db_now FROM tasks t
WHERE t.status = 'dead' AND t.status = ANY($1::text[])
  AND ($2::text IS NULL OR t.task_type = $2)
  AND ($3::text IS NULL
       OR strpos(t.task_type, lower($3)) > 0
       OR strpos(lower(coalesce(t.last_error ->> 'code', '')), lower($3)) > 0
       OR strpos(lower(coalesce(t.last_error ->> 'message', '')), lower($3)) > 0)
  -- A bound rather than an IS NULL test, so any plan can start the index scan at the cursor.
  AND t.id < coalesce($4::bigint, 9223372036854775807)
ORDER BY t.id DESC
LIMIT $5
