-- Operator run-now of task ?2: due at now ?1 when it waits (queued, retry_wait) and is not yet
-- due; the claim takes it in its turn. One row changed, or none (already due, or not waiting).
UPDATE tasks SET available_at = ?1, updated_at = ?1
WHERE id = ?2 AND status IN ('queued', 'retry_wait') AND available_at > ?1
