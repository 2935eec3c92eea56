UPDATE agents SET state = 'stopped', stopped_at = now(), active = 0, heartbeat_at = now()
WHERE id = $1 AND state <> 'stopped'
