-- Which of owner $1's leases ($2 ids, $3 epochs) it gave back already: read for the ones
-- lease_release_many.sql left unchanged, in a new statement, so a release retried after its
-- first commit's reply was lost (or one that committed while that statement waited) is a
-- repeat, not fenced. Only the holder's own release writes these outcomes for its epoch
-- ('cancelled' when the cancel was requested).
SELECT a.task_id AS id
FROM unnest($2::bigint[], $3::bigint[]) AS l(id, epoch)
JOIN task_attempts a ON a.task_id = l.id AND a.epoch = l.epoch AND a.agent = $1
WHERE a.outcome IN ('released', 'cancelled')
