-- Shard groups (?2: only that one; NULL: all) by name, with live members and owned shards at
-- now ?3 (?1: microseconds of grace past a lease).
SELECT g.name, g.shard_count, g.created_at,
       (SELECT count(*) FROM shard_members m
        WHERE m.group_name = g.name AND m.lease_until + ?1 >= ?3) AS members,
       (SELECT count(*) FROM resource_leases l
        WHERE l.group_name = g.name AND l.owner IS NOT NULL
          AND l.lease_until + ?1 >= ?3) AS owned
FROM shard_groups g WHERE ?2 IS NULL OR g.name = ?2 ORDER BY g.name
