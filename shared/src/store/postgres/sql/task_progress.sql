-- Fenced progress write. $1 id, $2 owner, $3 epoch, $4 progress.
-- The status test is wrapped in CASE on purpose: written plainly it matches the predicate of
-- tasks_leased_type_idx, and with statistics taken when few tasks ran the planner would scan
-- that whole partial index (dead entries included) instead of looking the ids up by primary key.
UPDATE tasks
SET progress = $4::jsonb
WHERE id = $1 AND done_on = 'infinity' AND lease_owner = $2 AND lease_epoch = $3 AND CASE WHEN status IN ('running', 'cancel_requested') THEN true ELSE false END
RETURNING id
