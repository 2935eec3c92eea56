SELECT *, now() AS now FROM agents
WHERE state <> 'stopped' OR stopped_at > now() - interval '1 hour'
ORDER BY name, started_at, id
