-- The first holding of lock $1 (no row yet), as resource_take.sql; nothing when a concurrent
-- acquire created the row first (the caller then locks it and decides again).
WITH t AS (
    INSERT INTO resource_leases (name, owner, token, lease_until, heartbeat_at, acquired_at,
                                 lock_at_least_until, lock_at_most_until)
    VALUES ($1, $2, $3, $5, $4, $4, $6, $7)
    ON CONFLICT (name) DO NOTHING
    RETURNING name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at, lock_at_least_until, lock_at_most_until, released_at
),
h AS (
    INSERT INTO resource_lease_history (name, group_name, owner, token, acquired_at)
    SELECT name, group_name, owner, token, acquired_at FROM t
)
SELECT name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at, lock_at_least_until, lock_at_most_until, released_at FROM t
