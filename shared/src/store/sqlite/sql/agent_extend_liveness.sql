-- Agent ?1's proof of life from its heartbeat connection: alive until ?2 (not when stopped).
UPDATE agents SET alive_until = ?2 WHERE id = ?1 AND state <> 'stopped'
