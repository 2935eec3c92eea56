-- bench/claim-write.sh, variant "range + HOT row write" (a DIAGNOSIS, never shipped): the row
-- write of range_claim_update.sql without `status`, the one column it sets that indexes read
-- (the predicates of tasks_claim_idx and tasks_leased_type_idx): PostgreSQL can then update the
-- row in place on its page (HOT), with no new index entries. The rows stay 'queued' (the cursor
-- never hands them out again; this variant's completion accepts them), so it measures a per-row
-- claim write at its cheapest. Correct only for the bench, as the other variants.
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
SET lease_owner = $1,
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
