-- The leader lease row, and now.
SELECT owner, term, elected_at, lease_until, heartbeat_at, now() AS now
FROM leader WHERE name = 'default'
