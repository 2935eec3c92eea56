-- Take up to $2 leases whose lease_until + $1 seconds of grace has passed (database time).
-- The update re-checks status, owner, epoch and expiry of what was selected, so a row that
-- finished or moved to a newer epoch in between is never touched. The epoch is bumped, so the
-- old holder is fenced even before anyone claims the task again. The task is due at once (a
-- lost lease is the agent's failure, not the task's), but the attempt still counts: with none
-- left it is dead-lettered. A cancel_requested task ends cancelled.
-- With $3 (may be NULL) nothing is taken while now() is past $3: the leader's bound on what the
-- database clock can read, so a clock that jumped forward revokes nothing.
WITH expired AS (
    SELECT id, lease_owner, lease_epoch
    FROM tasks
    WHERE status IN ('running', 'cancel_requested')
      AND lease_until + make_interval(secs => $1) < now()
      AND ($3::timestamptz IS NULL OR now() <= $3::timestamptz)
    ORDER BY lease_until
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
upd AS (
    UPDATE tasks t
    SET status = CASE
            WHEN t.status = 'cancel_requested' THEN 'cancelled'
            WHEN t.attempt >= t.max_attempts THEN 'dead'
            ELSE 'retry_wait'
        END,
        -- A task that will run again gets a new epoch now, fencing the old holder before anyone
        -- claims it; one that ends here keeps the epoch of the attempt it ended (the row says
        -- who held it last; its status already fences every late write).
        lease_epoch = CASE WHEN t.status = 'running' AND t.attempt < t.max_attempts
                           THEN t.lease_epoch + 1 ELSE t.lease_epoch END,
        lease_until = NULL,
        available_at = now(),
        last_error = CASE WHEN t.status = 'cancel_requested' THEN t.last_error ELSE jsonb_build_object(
            'code', 'lease_expired',
            'message', format('lease held by %s (epoch %s) expired at %s and was not renewed within the grace period',
                              t.lease_owner, t.lease_epoch, t.lease_until),
            'retryable', true) END,
        finished_at = CASE WHEN t.status = 'cancel_requested' OR t.attempt >= t.max_attempts THEN now() END,
        updated_at = now()
    FROM expired e
    WHERE t.id = e.id
      AND t.lease_owner = e.lease_owner
      AND t.lease_epoch = e.lease_epoch
      AND t.status IN ('running', 'cancel_requested')
      AND t.lease_until + make_interval(secs => $1) < now()
    RETURNING t.id, t.task_type, e.lease_owner AS owner, e.lease_epoch AS revoked_epoch, t.status,
              t.attempt, t.started_at, t.last_error
),
attempt_row AS (
    INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, outcome, error)
    SELECT id, revoked_epoch, attempt, owner, coalesce(started_at, now()), 'lease_expired',
           jsonb_build_object('code', 'lease_expired', 'message', 'lease expired and was recovered', 'retryable', true)
    FROM upd
)
SELECT id, task_type, owner, revoked_epoch, status FROM upd
