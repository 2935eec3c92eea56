-- Member $2 joins group $1 (or renews its membership) for $3 seconds; no row when there is
-- no such group.
INSERT INTO shard_members (group_name, member, lease_until)
SELECT name, $2, now() + make_interval(secs => $3) FROM shard_groups WHERE name = $1
ON CONFLICT (group_name, member)
DO UPDATE SET heartbeat_at = now(), lease_until = EXCLUDED.lease_until
RETURNING member
