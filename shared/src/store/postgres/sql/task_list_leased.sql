-- Leased tasks (running, cancel_requested): task_list.sql with the leased statuses as a
-- constant, so the plan reads the small leased set through tasks_leased_type_idx.
-- $1 which of the leased statuses; the rest is task_list_page.sql.
SELECT t.*, now() AS db_now FROM tasks t
WHERE t.done_on = 'infinity' AND t.status IN ('running', 'cancel_requested') AND t.status = ANY($1::text[])
