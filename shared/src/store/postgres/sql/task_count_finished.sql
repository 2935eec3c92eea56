-- Finished tasks in the statuses $4 (one state of the Tasks view: {succeeded,
-- partially_succeeded}, {cancelled} or {dead}) matching $1 type, $2 text, $3 exact error code
-- (as task_count_live.sql), counting at most $5 rows: the caller asks for one past its cap, so
-- a full count means "more". Never tasks_live (done_on <> 'infinity' prunes it); run under a
-- statement timeout, since a filter that matches few rows of a long history reads it all.
SELECT count(*) AS n FROM (
    SELECT 1 FROM tasks t
    WHERE t.done_on <> 'infinity'
      AND t.status = ANY($4::text[])
      AND ($1::text IS NULL OR t.task_type = $1)
      AND ($2::text IS NULL
           OR strpos(t.task_type, lower($2)) > 0
           OR strpos(lower(coalesce(t.last_error ->> 'code', '')), lower($2)) > 0
           OR strpos(lower(coalesce(t.last_error ->> 'message', '')), lower($2)) > 0)
      AND ($3::text IS NULL OR t.last_error ->> 'code' = $3)
    LIMIT $5
) s
