-- Renew owner $1's leases ($2 ids, $3 epochs) for $4 seconds of database time. A lease that
-- expired but was not yet recovered is still held and is renewed (the debounce). Rows that do
-- not come back are lost. Always returns at least one row (with now()).
-- Rows are locked in id order first (as task_complete_many does), so a renewal racing a batch
-- completion of the same leases waits instead of deadlocking; a row that finished while we
-- waited no longer matches and is reported lost (the completion that finished it says more).
-- The status test is wrapped in CASE on purpose: written plainly it matches the predicate of
-- tasks_leased_type_idx, and with statistics taken when few tasks ran the planner would scan
-- that whole partial index (dead entries included) instead of looking the ids up by primary key.
-- With $5 (seconds, may be NULL) the same statement pushes owner $1's registry liveness
-- deadline to now() + $5: the heartbeat connection's proof of life, one round trip per beat,
-- sent with no leases too. A stopped agent's row is left alone.
WITH alive AS (
    UPDATE agents
    SET alive_until = now() + make_interval(secs => $5)
    WHERE id = $1 AND $5::double precision IS NOT NULL AND state <> 'stopped'
),
locked AS (
    SELECT t.id
    FROM tasks t
    JOIN unnest($2::bigint[], $3::bigint[]) AS l(id, epoch) ON t.id = l.id AND t.lease_epoch = l.epoch
    WHERE t.done_on = 'infinity' AND t.lease_owner = $1 AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    ORDER BY t.id
    FOR UPDATE OF t
),
renewed AS (
    UPDATE tasks t
    SET lease_until = now() + make_interval(secs => $4),
        heartbeat_at = now()
    FROM locked
    WHERE t.id = locked.id AND t.done_on = 'infinity'
    RETURNING t.id, t.lease_epoch, t.lease_until, t.status = 'cancel_requested' AS cancel_requested
)
SELECT now() AS now, r.id, r.lease_epoch, r.lease_until, r.cancel_requested
FROM (SELECT 1) one LEFT JOIN renewed r ON true
