-- The holder of an idempotency key, locked before an enqueue judges and changes it: $1 task id,
-- $2 idempotency key, $3 unique_for ms (null: none). Under READ COMMITTED the lock waits for a
-- claim, completion or enqueue holding the row and then reads its latest version, so the status
-- judged is the status changed (a claimed task is never replaced). No row: the key moved away
-- (released by a concurrent enqueue, or the row purged) — look the key up again.
-- `expired`: with unique_for, the holder finished at least that long ago (database time) and
-- may give the key up.
SELECT status::text AS status,
       ($3::bigint IS NOT NULL
        AND status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
        AND finished_at IS NOT NULL
        AND finished_at <= now() - $3::bigint * interval '1 millisecond') AS expired
FROM tasks
WHERE id = $1 AND idempotency_key = $2
FOR UPDATE
