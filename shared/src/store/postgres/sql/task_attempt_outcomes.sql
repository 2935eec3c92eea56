-- Which of these (task, epoch, owner, outcome) completions are already recorded, and the
-- task's status now: run in a new statement for the rows task_complete_many.sql left unchanged,
-- so a completion committed while that statement waited is seen and reported as a repeat (the
-- rows not found here were fenced).
SELECT a.task_id AS id, t.status
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[]) AS i(id, owner, epoch, outcome)
JOIN task_attempts a ON a.task_id = i.id AND a.epoch = i.epoch AND a.agent = i.owner
    -- A snooze that ended the task (refused) was recorded as failed or cancelled.
    AND (a.outcome = i.outcome OR (i.outcome = 'snoozed' AND a.outcome IN ('failed', 'cancelled')))
JOIN tasks t ON t.id = i.id
