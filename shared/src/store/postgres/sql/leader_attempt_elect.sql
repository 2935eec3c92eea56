-- Owner $1 becomes or stays leader for $2 seconds. Someone else's leadership is taken only
-- after its lease_until + $3 seconds of grace (the same debounce as task leases); each change of
-- owner starts a new term, the fencing token of leadership.
WITH cur AS (
    SELECT owner, term, lease_until FROM leader WHERE name = 'default'
),
upd AS (
    UPDATE leader l
    SET owner = $1,
        term = CASE WHEN l.owner IS NOT DISTINCT FROM $1 AND l.lease_until IS NOT NULL THEN l.term ELSE l.term + 1 END,
        lease_until = now() + make_interval(secs => $2),
        heartbeat_at = now(),
        elected_at = CASE WHEN l.owner IS NOT DISTINCT FROM $1 AND l.lease_until IS NOT NULL THEN l.elected_at ELSE now() END
    WHERE l.name = 'default'
      AND (l.owner IS NULL OR l.lease_until IS NULL OR l.owner = $1
           OR l.lease_until + make_interval(secs => $3) < now())
    RETURNING l.owner, l.term, l.lease_until
)
SELECT (SELECT count(*) FROM upd) > 0 AS elected,
       coalesce((SELECT owner FROM upd), cur.owner) AS owner,
       coalesce((SELECT term FROM upd), cur.term) AS term,
       coalesce((SELECT lease_until FROM upd), cur.lease_until) AS lease_until,
       now() AS now
FROM cur
