-- Fenced checkpoint write. ?1 id, ?2 owner, ?3 epoch, ?4 checkpoint (JSON text), ?5 now. The
-- next attempt of the task receives it; it stays on the row after the task ends.
UPDATE tasks SET checkpoint = ?4, checkpoint_at = ?5
WHERE id = ?1 AND lease_owner = ?2 AND lease_epoch = ?3 AND status IN ('running', 'cancel_requested')
