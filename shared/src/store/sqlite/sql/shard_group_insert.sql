-- Group ?1 of ?2 shards, created at now ?3 (its shards: shard_group_insert_shards.sql).
INSERT INTO shard_groups (name, shard_count, created_at) VALUES (?1, ?2, ?3)
