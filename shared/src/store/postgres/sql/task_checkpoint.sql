-- Fenced checkpoint write. $1 id, $2 owner, $3 epoch, $4 checkpoint. The next attempt of the
-- task receives it (the claim returns it); it stays on the row after the task ends.
-- The status test is wrapped in CASE for the reason task_progress.sql gives.
UPDATE tasks
SET checkpoint = $4::jsonb,
    checkpoint_at = now()
WHERE id = $1 AND done_on = 'infinity' AND lease_owner = $2 AND lease_epoch = $3 AND CASE WHEN status IN ('running', 'cancel_requested') THEN true ELSE false END
RETURNING id
