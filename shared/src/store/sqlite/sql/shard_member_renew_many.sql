-- Member ?1 renews its memberships of groups ?4 (JSON array): heartbeat at now ?2, lease until
-- ?3. Returns the groups renewed.
UPDATE shard_members SET heartbeat_at = ?2, lease_until = ?3
WHERE member = ?1 AND group_name IN (SELECT value FROM json_each(?4))
RETURNING group_name
