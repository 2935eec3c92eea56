-- Delete up to ?3 finished tasks of statuses ?1 (JSON array) that finished before ?2
-- (retention), oldest first.
DELETE FROM tasks WHERE id IN (
    SELECT id FROM tasks
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
      AND status IN (SELECT value FROM json_each(?1)) AND finished_at < ?2
    ORDER BY finished_at LIMIT ?3)
