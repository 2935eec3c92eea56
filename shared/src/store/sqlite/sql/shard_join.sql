-- Member ?2 joins group ?1 (or renews its membership) at now ?3 until ?4; no row when there is
-- no such group. The WHERE keeps SQLite from reading ON CONFLICT as part of the SELECT's join.
INSERT INTO shard_members (group_name, member, joined_at, heartbeat_at, lease_until)
SELECT name, ?2, ?3, ?3, ?4 FROM shard_groups WHERE name = ?1
ON CONFLICT (group_name, member)
DO UPDATE SET heartbeat_at = excluded.heartbeat_at, lease_until = excluded.lease_until
RETURNING member
