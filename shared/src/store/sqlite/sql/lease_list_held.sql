-- The leased rows of tasks ?1 (JSON array of ids) whose lease owner is ?2, by id; the caller
-- keeps those whose epoch matches.
SELECT id, lease_epoch, status, attempt, started_at FROM tasks
WHERE id IN (SELECT value FROM json_each(?1)) AND lease_owner = ?2
  AND status IN ('running', 'cancel_requested')
ORDER BY id
