-- bench/claim-write.sh, variant "range + row write" (a DIAGNOSIS, never shipped): today's claim
-- UPDATE of each task row (status, owner, epoch, lease times), but the rows are found by a
-- shared cursor's id range instead of walking tasks_claim_idx with FOR UPDATE SKIP LOCKED and
-- the policy CTEs. Correct only for the bench: one type, no limits, ids claimed in order.
WITH cur AS (
    UPDATE claim_write_cursor SET pos = pos + $3::bigint RETURNING pos - $3::bigint AS lo, pos AS hi
),
chosen AS (
    SELECT t.id FROM tasks t
    WHERE t.done_on = 'infinity' AND t.id > (SELECT lo FROM cur) AND t.id <= (SELECT hi FROM cur)
      AND t.status = 'queued'
      AND $2::text[] IS NOT NULL AND $5::text[] IS NOT NULL
)
UPDATE tasks t
SET status = 'running',
    lease_owner = $1,
    lease_epoch = t.lease_epoch + 1,
    lease_until = statement_timestamp() + make_interval(secs => $4),
    heartbeat_at = statement_timestamp(),
    attempt = t.attempt + 1,
    started_at = statement_timestamp(),
    progress = NULL,
    updated_at = statement_timestamp()
FROM chosen
WHERE t.id = chosen.id AND t.done_on = 'infinity'
RETURNING t.id, t.task_type, t.payload, t.priority, t.available_at, t.deadline_at, t.timeout_ms,
          t.attempt, t.max_attempts, t.lease_epoch, t.lease_until, t.idempotency_key, t.result,
          t.last_error, t.created_at, t.finished_at, statement_timestamp() AS db_now,
          NULL::text[] AS rated,
          t.concurrency_key, t.snoozes, t.checkpoint, t.checkpoint_at
