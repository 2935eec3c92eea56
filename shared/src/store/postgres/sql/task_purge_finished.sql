-- Row by row, over every partition (a retention shorter than a day, which partitions by day
-- cannot serve, and statuses other than succeeded): delete up to $3 finished tasks of statuses $1 whose finished_at is older than $2 seconds of
-- database time (retention). Their attempts go with them (statement trigger on tasks).
WITH old AS (
    SELECT id, done_on FROM tasks
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
      AND status = ANY($1::text[])
      AND finished_at < now() - make_interval(secs => $2)
    ORDER BY finished_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM tasks t
    USING old
    WHERE t.id = old.id AND t.done_on = old.done_on AND t.status = ANY($1::text[])
    RETURNING t.id
)
SELECT count(*) AS purged FROM gone
