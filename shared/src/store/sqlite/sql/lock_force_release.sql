-- An operator frees lock ?1 whoever holds it; the token stays (the next holding's is higher).
UPDATE resource_leases
SET owner = NULL, lease_until = NULL, released_at = NULL, lock_at_least_until = NULL,
    lock_at_most_until = NULL
WHERE name = ?1 AND group_name IS NULL
RETURNING name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at
