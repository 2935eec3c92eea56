-- Member ?2 leaves group ?1.
DELETE FROM shard_members WHERE group_name = ?1 AND member = ?2
