-- The resource lease row ?1, read under the write lock by the acquire or release that decides
-- on it.
SELECT name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at
FROM resource_leases WHERE name = ?1
