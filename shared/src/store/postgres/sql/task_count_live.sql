-- Tasks per waiting and running state for the console's Tasks view, exactly: $1 type, $2 text
-- in type / error code / error message (case-insensitive, as task_list_page.sql), $3 exact
-- error code (null: any). One pass over tasks_live only (done_on = 'infinity': every unfinished
-- task and nothing else, small by design), never the finished history.
SELECT count(*) FILTER (WHERE t.status = 'queued' AND t.available_at <= now()) AS queued,
       count(*) FILTER (WHERE t.status = 'queued' AND t.available_at > now()) AS scheduled,
       count(*) FILTER (WHERE t.status = 'retry_wait') AS retrying,
       count(*) FILTER (WHERE t.status IN ('running', 'cancel_requested')) AS running,
       now() AS db_now
FROM tasks t
WHERE t.done_on = 'infinity'
  AND ($1::text IS NULL OR t.task_type = $1)
  AND ($2::text IS NULL
       OR strpos(t.task_type, lower($2)) > 0
       OR strpos(lower(coalesce(t.last_error ->> 'code', '')), lower($2)) > 0
       OR strpos(lower(coalesce(t.last_error ->> 'message', '')), lower($2)) > 0)
  AND ($3::text IS NULL OR t.last_error ->> 'code' = $3)
