-- How many dead tasks match (same filter as task_requeue_dead.sql): the dry run.
SELECT count(*) AS count FROM tasks
WHERE status = 'dead'
  AND ($1::text IS NULL OR task_type = $1)
  AND ($2::text IS NULL OR last_error ->> 'code' = $2)
  AND ($3::timestamptz IS NULL OR finished_at >= $3)
  AND ($4::timestamptz IS NULL OR finished_at < $4)
