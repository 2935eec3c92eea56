-- Group $1 of $2 shards, each a free resource lease named '<group>#<shard>'. Nothing when
-- a concurrent create made it first.
WITH g AS (
    INSERT INTO shard_groups (name, shard_count) VALUES ($1, $2)
    ON CONFLICT (name) DO NOTHING
    RETURNING name, shard_count
)
INSERT INTO resource_leases (name, group_name, shard)
SELECT g.name || '#' || s, g.name, s FROM g, generate_series(0, g.shard_count - 1) AS s
RETURNING shard
