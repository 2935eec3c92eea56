-- Holder $1 renews its leases ($2 names, $3 tokens) and its memberships of groups $5 for $4
-- seconds, fenced as resource_renew.sql. Rows: one per lease renewed (kind 'lease'), one per
-- membership renewed (kind 'member'), and always one of kind 'now'.
WITH m AS (
    UPDATE shard_members
    SET heartbeat_at = now(), lease_until = now() + make_interval(secs => $4)
    WHERE member = $1 AND group_name = ANY($5::text[])
    RETURNING group_name
),
r AS (
    UPDATE resource_leases l
    SET lease_until = LEAST(now() + make_interval(secs => $4), coalesce(l.lock_at_most_until, 'infinity')),
        heartbeat_at = now()
    FROM unnest($2::text[], $3::bigint[]) AS h(name, token)
    WHERE l.name = h.name AND l.token = h.token AND l.owner = $1 AND l.released_at IS NULL
      AND l.lease_until IS NOT NULL
      AND (l.lock_at_most_until IS NULL OR l.lock_at_most_until > now())
    RETURNING l.name, l.token, l.lease_until
)
SELECT 'lease' AS kind, r.name, r.token, r.lease_until, now() AS now FROM r
UNION ALL
SELECT 'member', m.group_name, 0, NULL, now() FROM m
UNION ALL
SELECT 'now', NULL, 0, NULL, now()
