-- Recover expired leases listed (and locked) by lease_list_expired.sql in this transaction, as
-- the store decided (store/lifecycle.rs `recover`): $1 ids, $2 owners and $3 epochs as listed,
-- $4 new statuses (retry_wait, dead or cancelled), $5 new epochs, $6 last errors (null keeps
-- it), $7 attempt-row errors, $8 whether the task ends here. The update re-checks status,
-- owner, epoch and expiry, so a row that changed since it was listed is never touched. The task
-- is due at once; the attempt row records the expiry. The re-check is wrapped in CASE so the
-- planner looks the ids up by primary key rather than scan tasks_leased_type_idx, whose predicate
-- it would otherwise match (see task_complete_many.sql).
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::bigint[],
                         $6::jsonb[], $7::jsonb[], $8::boolean[])
        AS i(id, owner, epoch, status, new_epoch, error, attempt_error, finished)
    ORDER BY 1
),
upd AS (
    UPDATE tasks t
    SET status = i.status,
        lease_epoch = i.new_epoch,
        lease_until = NULL,
        available_at = now(),
        last_error = coalesce(i.error, t.last_error),
        finished_at = CASE WHEN i.finished THEN now() END,
        done_on = CASE WHEN i.finished THEN (now() AT TIME ZONE 'UTC')::date ELSE 'infinity'::date END,
        updated_at = now()
    FROM input i
    WHERE t.id = i.id
      AND t.done_on = 'infinity'
      AND t.lease_owner = i.owner
      AND t.lease_epoch = i.epoch
      AND CASE WHEN t.status IN ('running', 'cancel_requested') AND t.lease_until < now()
               THEN true ELSE false END
    RETURNING t.id, t.task_type, i.owner, i.epoch AS revoked_epoch, t.status, t.attempt,
              t.started_at, i.attempt_error
),
attempt_row AS (
    INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, outcome, error)
    SELECT id, revoked_epoch, attempt, owner, coalesce(started_at, now()), 'lease_expired',
           attempt_error
    FROM upd
)
SELECT id, task_type, owner, revoked_epoch, status FROM upd
