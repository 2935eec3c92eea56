-- The leader lease row. No parameters.
SELECT owner, term, elected_at, lease_until, heartbeat_at FROM leader
WHERE name = 'default'
