-- Claim tasks ?4 (JSON array of ids, picked from task_claim_candidates.sql) for owner ?1:
-- a new epoch, a lease until ?2, started at now ?3. Returns the claimed rows.
UPDATE tasks SET status = 'running', lease_owner = ?1, lease_epoch = lease_epoch + 1,
       lease_until = ?2, heartbeat_at = ?3, attempt = attempt + 1, started_at = ?3,
       progress = NULL, updated_at = ?3
WHERE id IN (SELECT value FROM json_each(?4)) AND status IN ('queued', 'retry_wait')
RETURNING *
