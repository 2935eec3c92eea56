-- Waiting tasks (queued, retry_wait): task_list.sql read from tasks_live only (done_on =
-- 'infinity'), so a page never walks the finished history's indexes looking for them.
-- $1 which of the waiting statuses; the rest is task_list_page.sql.
SELECT t.*, now() AS db_now FROM tasks t
WHERE t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.status = ANY($1::text[])
