-- Finished tasks but dead ones (task_list_dead.sql): task_list.sql without tasks_live (done_on
-- <> 'infinity' prunes it), so a page never walks the live partition looking for them.
-- $1 which of succeeded, partially_succeeded, cancelled; the rest is task_list_page.sql.
SELECT t.*, now() AS db_now FROM tasks t
WHERE t.done_on <> 'infinity' AND t.status IN ('succeeded', 'partially_succeeded', 'cancelled')
  AND t.status = ANY($1::text[])
