-- The first holding of lock ?1 (no row yet), as resource_take.sql: holder ?2, token ?3, at
-- now ?4, lease until ?5, ShedLock bounds ?6/?7.
INSERT INTO resource_leases (name, owner, token, lease_until, heartbeat_at, acquired_at,
                             lock_at_least_until, lock_at_most_until)
VALUES (?1, ?2, ?3, ?5, ?4, ?4, ?6, ?7)
RETURNING name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at
