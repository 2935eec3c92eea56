-- How many agents are live.
-- Live agents: not stopped, and their own liveness deadline is after now ?1; a row
-- without one (an agent from before it existed) is live while its registry heartbeat
-- is younger than ?2 microseconds.
SELECT count(*) FROM agents a WHERE a.state <> 'stopped' AND coalesce(a.alive_until, a.heartbeat_at + ?2) > ?1
