-- Agents heard from within the last hour (a crashed agent never marks itself stopped: it goes
-- silent and drops out like a stopped one), plus those stopped within the last hour.
-- `leader`: the agent holds the leader row under a lease that has not expired (an expired
-- lease within its takeover grace is nobody's leadership to show).
SELECT a.*, now() AS now,
       EXISTS (SELECT 1 FROM leader l WHERE l.owner = a.id AND l.lease_until > now()) AS leader
FROM agents a
WHERE (a.state <> 'stopped' AND a.heartbeat_at > now() - interval '1 hour')
   OR a.stopped_at > now() - interval '1 hour'
ORDER BY a.name, a.started_at, a.id
