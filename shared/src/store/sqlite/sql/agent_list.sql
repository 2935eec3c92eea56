-- Agents heard from since ?2 (an hour before now ?1), plus those stopped since then, as
-- rows::agent reads them (`leader`: it holds the leader lease now).
SELECT a.*, ?1 AS now,
       EXISTS (SELECT 1 FROM leader l WHERE l.owner = a.id AND l.lease_until > ?1) AS leader
FROM agents a
WHERE (a.state <> 'stopped' AND a.heartbeat_at > ?2) OR a.stopped_at > ?2
ORDER BY a.name, a.started_at, a.id
