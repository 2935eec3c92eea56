-- Holder $2 gives lease $1 of token $3 back (fenced). Before its lock_at_least_until it stays
-- held until then (released_at set, renewed by nobody); otherwise it is free at once. The
-- holding's history row is marked released, so a retry of this release is told it landed
-- (resource_release_repeated.sql).
WITH r AS (
    UPDATE resource_leases
    SET released_at = CASE WHEN lock_at_least_until > now() THEN now() END,
        lease_until = CASE WHEN lock_at_least_until > now() THEN lock_at_least_until END,
        owner = CASE WHEN lock_at_least_until > now() THEN owner END
    WHERE name = $1 AND owner = $2 AND token = $3 AND lease_until IS NOT NULL
      AND released_at IS NULL
    RETURNING name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at, lock_at_least_until, lock_at_most_until, released_at
),
h AS (
    UPDATE resource_lease_history h SET released_at = now()
    FROM r
    WHERE h.name = r.name AND h.token = r.token
)
SELECT name, group_name, shard, owner, token, lease_until, heartbeat_at, acquired_at, lock_at_least_until, lock_at_most_until, released_at FROM r
