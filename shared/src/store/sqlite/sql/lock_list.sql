-- Every lock (not shards) by name, with how often it changed owner since ?1 (an hour ago):
-- holdings whose previous token's owner was someone else.
SELECT name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at,
       lock_at_least_until, lock_at_most_until, released_at,
       (SELECT count(*) FROM resource_lease_history h
        JOIN resource_lease_history p ON p.name = h.name AND p.token = h.token - 1
        WHERE h.name = l.name AND h.acquired_at > ?1 AND p.owner <> h.owner) AS moves
FROM resource_leases l WHERE l.group_name IS NULL ORDER BY l.name
