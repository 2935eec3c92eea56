-- Fenced progress write. ?1 id, ?2 owner, ?3 epoch, ?4 progress; ?5 (now) is not needed.
UPDATE tasks SET progress = ?4
WHERE id = ?1 AND lease_owner = ?2 AND lease_epoch = ?3
  AND status IN ('running', 'cancel_requested')
