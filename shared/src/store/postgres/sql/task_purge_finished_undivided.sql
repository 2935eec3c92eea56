-- Retention row by row where finished days are not partitions of their own: tasks_done_kept
-- (tasks that outlived their day), tasks_done_default (days finished without a partition) and
-- finished rows a plain UPDATE left in tasks_live. Deletes up to $3 from each of tasks of
-- statuses $1 finished more than $2 seconds ago (database time), with their attempts' rows (a
-- DELETE that names a partition does not fire the trigger on tasks).
-- tasks_live holds the whole queue: its rows are looked up by primary key from the ids the
-- finished-rows index gave (an array, so even the generic plan cannot turn the lookup into a
-- scan of tasks_live filtered by status: written `t.id IN (…) AND t.status = ANY($1)`, it
-- did, 0.4 s a million queued tasks on every pass once the plan went generic).
WITH live AS (
    DELETE FROM tasks_live t
    WHERE t.id = ANY (ARRAY(SELECT id FROM tasks_live
                            WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
                              AND status = ANY($1::text[])
                              AND finished_at < now() - make_interval(secs => $2)
                            ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED))
      AND t.done_on = 'infinity'
      AND t.status = ANY($1::text[])
    RETURNING t.id
),
kept AS (
    DELETE FROM tasks_done_kept t
    WHERE t.id IN (SELECT id FROM tasks_done_kept
                   WHERE status = ANY($1::text[])
                     AND finished_at < now() - make_interval(secs => $2)
                   ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED)
      AND t.status = ANY($1::text[])
    RETURNING t.id
),
undivided AS (
    DELETE FROM tasks_done_default t
    WHERE t.id IN (SELECT id FROM tasks_done_default
                   WHERE status = ANY($1::text[])
                     AND finished_at < now() - make_interval(secs => $2)
                   ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED)
      AND t.status = ANY($1::text[])
    RETURNING t.id
),
gone AS (
    SELECT id FROM live UNION ALL SELECT id FROM kept UNION ALL SELECT id FROM undivided
),
attempts AS (
    DELETE FROM task_attempt_rows a USING gone WHERE a.task_id = gone.id
)
SELECT count(*) AS purged FROM gone
