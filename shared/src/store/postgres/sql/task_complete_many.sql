-- End attempts, one per input row, as the store decided them (store/lifecycle.rs: one rule for
-- every store): $1 ids, $2 owners, $3 epochs, $4 the attempts' outcomes (succeeded |
-- partially_succeeded | failed | cancelled | snoozed), $5 new statuses, $6 retry times (null: available_at stays), $7 errors
-- (null: last_error stays), $8 whether the result is written, $9 results, $10 whether the task
-- is finished, $11 whether it is a snooze (the attempt is given back, one more snooze counted).
-- A failure or a snooze was decided on the row task_complete_read.sql read and locked in this
-- transaction; every other outcome does not depend on the row.
-- Returns one row per attempt it ended ('applied'); an input row that does not come back
-- changed nothing: its key no longer matches a leased task (fenced), or the same outcome of
-- the same (task, epoch, owner) was recorded before (a repeat) — the caller tells the two
-- apart with task_attempt_outcomes.sql in a new statement, which also sees a completion that
-- committed while this one waited on its row.
-- One pass over the rows: each is found once by primary key and updated, in id order (the
-- input is sorted and the planner may only use nested loops here), as lease_renew_many locks
-- them, so a completion and a renewal of the same leases never deadlock.
-- Every SET column is assigned, so its domain check runs on what is written.
-- The status test is wrapped in CASE on purpose: written plainly it matches the predicate of
-- tasks_leased_type_idx, and with statistics taken when few tasks ran the planner would scan
-- that whole partial index (dead entries included) instead of looking the ids up by primary key.
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[],
                         $6::timestamptz[], $7::jsonb[], $8::boolean[], $9::jsonb[], $10::boolean[],
                         $11::boolean[])
        AS i(id, owner, epoch, outcome, status, retry_at, error, set_result, result, finished,
             snoozed)
    ORDER BY 1
),
upd AS (
    UPDATE tasks t
    SET status = i.status,
        available_at = coalesce(i.retry_at, t.available_at),
        last_error = coalesce(i.error, t.last_error),
        finished_at = CASE WHEN i.finished THEN now() END,
        done_on = CASE WHEN i.finished THEN (now() AT TIME ZONE 'UTC')::date ELSE 'infinity'::date END,
        lease_until = NULL,
        result = CASE WHEN i.set_result THEN i.result ELSE t.result END,
        final_outcome = CASE WHEN i.finished THEN i.outcome END,
        attempt = CASE WHEN i.snoozed THEN t.attempt - 1 ELSE t.attempt END,
        snoozes = CASE WHEN i.snoozed THEN t.snoozes + 1 ELSE t.snoozes END,
        updated_at = now()
    FROM input i
    WHERE t.id = i.id AND t.done_on = 'infinity' AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch
      AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    -- The attempt that ran: a snooze gave it back above.
    RETURNING t.id, t.status, t.available_at, t.lease_epoch,
              t.attempt + CASE WHEN i.snoozed THEN 1 ELSE 0 END AS attempt, t.lease_owner,
              t.started_at, i.error, i.outcome, i.finished
),
-- An attempt the task outlives (a failure to be retried, a snooze) gets its own row; the attempt that
-- finishes the task is recorded by the task row itself (final_outcome above; the
-- task_attempts view reads it from there), which saves a heap tuple and an index entry on
-- every successful task.
attempt_row AS (
    INSERT INTO task_attempt_rows (task_id, epoch, attempt, agent, started_at, outcome, error)
    SELECT u.id, u.lease_epoch, u.attempt, u.lease_owner, coalesce(u.started_at, now()), u.outcome,
           u.error
    FROM upd u
    WHERE NOT u.finished
)
SELECT u.id, u.status, CASE WHEN NOT u.finished THEN u.available_at END AS retry_at
FROM upd u
