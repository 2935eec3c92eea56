-- Agent ?1 stopped at now ?2 (once: a stopped agent is left as it is).
UPDATE agents SET state = 'stopped', stopped_at = ?2, active = 0, heartbeat_at = ?2
WHERE id = ?1 AND state <> 'stopped'
