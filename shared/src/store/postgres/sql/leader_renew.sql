UPDATE leader SET lease_until = now() + make_interval(secs => $3), heartbeat_at = now()
WHERE name = 'default' AND owner = $1 AND term = $2 AND lease_until IS NOT NULL
RETURNING term, now() AS now
