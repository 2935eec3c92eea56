UPDATE agents
SET heartbeat_at = now(), state = $2, active = $3, local_concurrency = $4,
    stopped_at = CASE WHEN $2 = 'stopped' THEN now() END
WHERE id = $1 AND state <> 'stopped'
RETURNING id
