-- The shards of group ?1 by number.
SELECT name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at
FROM resource_leases WHERE group_name = ?1 ORDER BY shard
