-- A page of tasks, newest first, keyset-paged by id; the rest is task_list_page.sql.
-- $1 statuses (null: all).
SELECT t.*, now() AS db_now FROM tasks t
WHERE ($1::text[] IS NULL OR t.status = ANY($1::text[]))
