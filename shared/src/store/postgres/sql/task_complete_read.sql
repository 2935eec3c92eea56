-- The rows a batch of completions with a failure or a snooze decides on: $1 ids (sorted), $2 owners,
-- $3 epochs. Only the rows still held under that key (running or cancel_requested) come back,
-- locked in id order as lease_renew_many and task_complete_many lock them, so a completion and
-- a renewal of the same leases never deadlock; the others are fenced or repeats, which
-- task_complete_many (fenced by the same key) leaves alone. now() is the transaction's, the
-- time the decision and the write both use.
SELECT t.id, t.task_type, t.status, t.attempt, t.max_attempts, t.deadline_at, t.snoozes, now() AS now
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS i(id, owner, epoch)
JOIN tasks t ON t.id = i.id AND t.done_on = 'infinity' AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch
WHERE CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
ORDER BY t.id
FOR UPDATE OF t
