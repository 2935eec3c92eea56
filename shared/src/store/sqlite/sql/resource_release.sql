-- Holder ?2 gives lease ?1 of token ?3 back at now ?4 (fenced: no row). Before its
-- lock_at_least_until it stays held until then (released_at set, renewed by nobody);
-- otherwise it is free at once.
UPDATE resource_leases
SET released_at = CASE WHEN lock_at_least_until > ?4 THEN ?4 END,
    lease_until = CASE WHEN lock_at_least_until > ?4 THEN lock_at_least_until END,
    owner = CASE WHEN lock_at_least_until > ?4 THEN owner END
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND lease_until IS NOT NULL
  AND released_at IS NULL
RETURNING name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at
