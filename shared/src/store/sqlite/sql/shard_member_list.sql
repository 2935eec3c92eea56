-- The members of group ?1 by id.
SELECT member, joined_at, heartbeat_at, lease_until FROM shard_members
WHERE group_name = ?1 ORDER BY member
