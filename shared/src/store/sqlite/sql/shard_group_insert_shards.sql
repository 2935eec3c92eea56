-- The ?2 shards of group ?1, each a free resource lease named '<group>#<shard>'.
WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < ?2)
INSERT INTO resource_leases (name, group_name, shard)
SELECT ?1 || '#' || n, ?1, n FROM s
