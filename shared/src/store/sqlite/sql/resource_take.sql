-- A new holding of lease ?1 by ?2 with token ?3 at now ?4: lease until ?5, ShedLock bounds
-- ?6/?7. The history row is written by resource_history_insert.sql.
UPDATE resource_leases SET owner = ?2, token = ?3, lease_until = ?5,
       heartbeat_at = ?4, acquired_at = ?4, lock_at_least_until = ?6,
       lock_at_most_until = ?7, released_at = NULL
WHERE name = ?1
RETURNING name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at
