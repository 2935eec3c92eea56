-- The dry run of task_requeue_dead.sql and task_purge_dead.sql (same filter): how many dead tasks
-- match $1 type, $2 error code, $3 died at or after, $4 died before (null = any), and a page of
-- their ids, newest first: below $5 (null = from the newest), at most $6 (the caller asks for one
-- more than it shows, to know whether another page follows). One statement, so the count and the
-- ids come from one snapshot and agree. Reads only; locks nothing.
WITH matching AS MATERIALIZED (
    SELECT id FROM tasks
    WHERE status = 'dead'
      AND ($1::text IS NULL OR task_type = $1)
      AND ($2::text IS NULL OR last_error ->> 'code' = $2)
      AND ($3::timestamptz IS NULL OR finished_at >= $3)
      AND ($4::timestamptz IS NULL OR finished_at < $4)
)
SELECT (SELECT count(*) FROM matching) AS count,
       coalesce((SELECT array_agg(page.id ORDER BY page.id DESC)
                 FROM (SELECT id FROM matching
                       WHERE id < coalesce($5::bigint, 9223372036854775807)
                       ORDER BY id DESC
                       LIMIT $6) page),
                '{}'::bigint[]) AS ids
