-- Owner $1 gives back leases ($2 ids, $3 epochs): running ones go back to queued, due now,
-- with the attempt refunded (a graceful shutdown is not the task's failure); ones whose cancel
-- was requested end cancelled. Each writes a 'released' attempt row. Fenced per row.
-- The status test is wrapped in CASE on purpose: written plainly it matches the predicate of
-- tasks_leased_type_idx, and with statistics taken when few tasks ran the planner would scan
-- that whole partial index (dead entries included) instead of looking the ids up by primary key.
WITH cur AS (
    SELECT t.id, t.status, t.attempt, t.started_at, t.lease_epoch
    FROM tasks t
    JOIN unnest($2::bigint[], $3::bigint[]) AS l(id, epoch) ON t.id = l.id AND t.lease_epoch = l.epoch
    WHERE t.done_on = 'infinity' AND t.lease_owner = $1 AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    ORDER BY t.id
    FOR UPDATE OF t
),
upd AS (
    UPDATE tasks t
    SET status = CASE WHEN cur.status = 'cancel_requested' THEN 'cancelled' ELSE 'queued' END,
        attempt = CASE WHEN cur.status = 'cancel_requested' THEN t.attempt ELSE greatest(t.attempt - 1, 0) END,
        available_at = now(),
        lease_until = NULL,
        finished_at = CASE WHEN cur.status = 'cancel_requested' THEN now() END,
        done_on = CASE WHEN cur.status = 'cancel_requested' THEN (now() AT TIME ZONE 'UTC')::date ELSE 'infinity'::date END,
        updated_at = now()
    FROM cur
    WHERE t.id = cur.id AND t.done_on = 'infinity'
    RETURNING t.id
),
attempt_row AS (
    INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, outcome)
    SELECT cur.id, cur.lease_epoch, cur.attempt, $1, coalesce(cur.started_at, now()),
           CASE WHEN cur.status = 'cancel_requested' THEN 'cancelled' ELSE 'released' END
    FROM cur
)
SELECT id FROM upd
