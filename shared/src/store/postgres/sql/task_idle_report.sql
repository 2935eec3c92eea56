-- The work of task types $1 as it stands now (`--exit-when-idle`), one row per kind, status and
-- type, with the count and the first $4 ids:
--   pending      of $1: queued, retry_wait (due or not), running, cancel_requested
--   ended_badly  of $1: dead, cancelled, created or finished within the last $2 seconds
--                ($2 NULL: every one still stored)
--   unserved     of other types: queued, retry_wait, whose type no live agent serves (live as in
--                task_dead_letter_unserved; $3 seconds for registry rows without alive_until)
-- Each branch walks a partial index of its statuses (claim, leased, dead) or, for cancelled,
-- the rows of that status. Database time throughout.
WITH served AS (
    SELECT DISTINCT unnest(task_types) AS task_type FROM agents
    WHERE state <> 'stopped'
      AND coalesce(alive_until, heartbeat_at + make_interval(secs => $3)) > now()
),
picked AS (
    SELECT 'pending' AS kind, t.id, t.status, t.task_type FROM tasks t
    WHERE t.status IN ('queued', 'retry_wait') AND t.task_type = ANY($1::text[])
    UNION ALL
    SELECT 'pending', t.id, t.status, t.task_type FROM tasks t
    WHERE t.status IN ('running', 'cancel_requested') AND t.task_type = ANY($1::text[])
    UNION ALL
    SELECT 'ended_badly', t.id, t.status, t.task_type FROM tasks t
    WHERE t.status IN ('dead', 'cancelled') AND t.task_type = ANY($1::text[])
      AND ($2::float8 IS NULL
           OR t.created_at >= now() - make_interval(secs => $2::float8)
           OR t.finished_at >= now() - make_interval(secs => $2::float8))
    UNION ALL
    SELECT 'unserved', t.id, t.status, t.task_type FROM tasks t
    WHERE t.status IN ('queued', 'retry_wait') AND NOT (t.task_type = ANY($1::text[]))
      AND NOT EXISTS (SELECT 1 FROM served s WHERE s.task_type = t.task_type)
)
SELECT kind, status::text AS status, task_type::text AS task_type, count(*) AS n,
       (array_agg(id ORDER BY id))[1:$4] AS ids
FROM picked
GROUP BY kind, status, task_type
ORDER BY kind, status, task_type
