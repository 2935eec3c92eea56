-- Up to $2 leases whose lease_until + $1 seconds of grace has passed (database time), oldest
-- expiry first, locked (rows a completing holder has locked are skipped: it finishes first and
-- wins). With $3 (may be NULL) nothing is listed while now() is past $3: the leader's bound on
-- what the database clock can read, so a clock that jumped forward revokes nothing.
SELECT id, task_type, status, lease_owner, lease_epoch, lease_until, attempt, max_attempts,
       now() AS now
FROM tasks
WHERE done_on = 'infinity' AND status IN ('running', 'cancel_requested')
  AND lease_until + make_interval(secs => $1) < now()
  AND ($3::timestamptz IS NULL OR now() <= $3::timestamptz)
ORDER BY lease_until
LIMIT $2
FOR UPDATE SKIP LOCKED
