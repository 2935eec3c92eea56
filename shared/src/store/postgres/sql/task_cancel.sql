-- Operator cancel of task $1: waiting tasks end cancelled at once; running ones become
-- cancel_requested for their holder to stop. Returns the status before and after (after is
-- null when nothing changed), and the holder.
WITH cur AS (
    SELECT id, done_on, status, lease_owner, lease_epoch FROM tasks WHERE id = $1 FOR UPDATE
),
upd AS (
    UPDATE tasks t
    SET status = CASE WHEN cur.status IN ('queued', 'retry_wait') THEN 'cancelled' ELSE 'cancel_requested' END,
        finished_at = CASE WHEN cur.status IN ('queued', 'retry_wait') THEN now() ELSE t.finished_at END,
        done_on = CASE WHEN cur.status IN ('queued', 'retry_wait') THEN (now() AT TIME ZONE 'UTC')::date ELSE t.done_on END,
        updated_at = now()
    FROM cur
    WHERE t.id = cur.id AND t.done_on = cur.done_on AND cur.status IN ('queued', 'retry_wait', 'running')
    RETURNING t.status
)
SELECT cur.status AS before, (SELECT status FROM upd) AS after, cur.lease_owner, cur.lease_epoch
FROM cur
