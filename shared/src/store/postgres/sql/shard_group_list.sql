-- Shard groups ($2: only that one; NULL: all) by name, with live members and owned shards
-- ($1: seconds of grace past a lease).
SELECT g.name, g.shard_count, g.created_at,
       (SELECT count(*) FROM shard_members m
        WHERE m.group_name = g.name AND m.lease_until + make_interval(secs => $1) >= now()) AS members,
       (SELECT count(*) FROM resource_leases l
        WHERE l.group_name = g.name AND l.owner IS NOT NULL
          AND l.lease_until + make_interval(secs => $1) >= now()) AS owned
FROM shard_groups g
WHERE $2::text IS NULL OR g.name = $2
ORDER BY g.name
