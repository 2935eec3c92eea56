-- The shard count of group ?1, read under the write lock by its creation.
SELECT shard_count FROM shard_groups WHERE name = ?1
