-- Up to ?2 leases whose last renewal is older than ?1, oldest renewal first: shown as renewal
-- failures, not taken.
SELECT id, task_type, lease_owner, lease_epoch, heartbeat_at, lease_until FROM tasks
WHERE status IN ('running', 'cancel_requested') AND heartbeat_at < ?1
ORDER BY heartbeat_at, id LIMIT ?2
