-- The group $1, locked for its creation.
SELECT shard_count FROM shard_groups WHERE name = $1 FOR UPDATE
