-- Holder ?2 renews lease ?1 of token ?3 until ?4 (never past lock_at_most_until), heartbeat at
-- now ?5. Fenced: no row when holder or token no longer match, it was released, or its
-- at-most bound passed. A lease past lease_until that nobody took yet is still held.
UPDATE resource_leases
SET lease_until = min(?4, coalesce(lock_at_most_until, ?4)), heartbeat_at = ?5
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND released_at IS NULL
  AND lease_until IS NOT NULL
  AND (lock_at_most_until IS NULL OR lock_at_most_until > ?5)
RETURNING name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at
