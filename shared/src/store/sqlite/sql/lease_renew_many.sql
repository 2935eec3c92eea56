-- Renew the leases of tasks ?3 (JSON array of ids, found held by lease_list_held.sql) until
-- ?1, heartbeat at now ?2.
UPDATE tasks SET lease_until = ?1, heartbeat_at = ?2
WHERE id IN (SELECT value FROM json_each(?3))
