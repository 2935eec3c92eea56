-- Leases whose last renewal is older than $1 seconds, oldest renewal first, at most $2:
-- shown as renewal failures, not taken.
SELECT id, task_type, lease_owner, lease_epoch, heartbeat_at, lease_until, now() AS now
FROM tasks
WHERE done_on = 'infinity' AND status IN ('running', 'cancel_requested')
  AND heartbeat_at < now() - make_interval(secs => $1)
ORDER BY heartbeat_at, id
LIMIT $2
