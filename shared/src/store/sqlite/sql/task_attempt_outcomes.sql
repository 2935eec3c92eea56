-- Is outcome ?4 of task ?1, epoch ?2, owner ?3 recorded already? Read for a completion whose
-- key no longer matches: a row means a repeat, none means fenced.
SELECT 1 FROM task_attempts
WHERE task_id = ?1 AND epoch = ?2 AND agent = ?3
  -- A snooze that ended the task (refused) was recorded as failed or cancelled.
  AND (outcome = ?4 OR (?4 = 'snoozed' AND outcome IN ('failed', 'cancelled')))
