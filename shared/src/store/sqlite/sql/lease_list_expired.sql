-- Up to ?2 leases that expired before ?1 (now less the grace), oldest expiry first.
SELECT id, task_type, status, lease_owner, lease_epoch, lease_until, attempt,
       max_attempts, started_at, last_error
FROM tasks WHERE status IN ('running', 'cancel_requested') AND lease_until < ?1
ORDER BY lease_until LIMIT ?2
