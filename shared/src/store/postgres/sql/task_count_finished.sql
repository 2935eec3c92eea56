  -- The shared rest of task_count_{succeeded,cancelled,dead}.sql (each names its statuses as
  -- constants, so a generic plan can prove the finished and dead-letter indexes' predicates):
  -- $1 type, $2 text, $3 exact error code (as task_count_live.sql), counting at most $4 rows
  -- (the caller asks for one past its cap, so a full count means "more"). Run under a statement
  -- timeout, since a filter that matches few rows of a long history reads it all.
      AND ($1::text IS NULL OR t.task_type = $1)
      AND ($2::text IS NULL
           OR strpos(t.task_type, lower($2)) > 0
           OR strpos(lower(coalesce(t.last_error ->> 'code', '')), lower($2)) > 0
           OR strpos(lower(coalesce(t.last_error ->> 'message', '')), lower($2)) > 0)
      AND ($3::text IS NULL OR t.last_error ->> 'code' = $3)
    LIMIT $4
) s
