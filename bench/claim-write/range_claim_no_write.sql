-- bench/claim-write.sh, variant "range, no row write" (a DIAGNOSIS, never shipped): a claim that
-- writes no task row. A shared cursor hands out id ranges (one small row updated a claim) and
-- the range's rows are read as they are; the lease the agent is told of (epoch + 1, lease_until)
-- exists nowhere in the database, so the completion of this variant checks no fence. What it
-- shows: the drain with everything a claim does per task taken away, the per-batch cursor left.
WITH cur AS (
    UPDATE claim_write_cursor SET pos = pos + $3::bigint RETURNING pos - $3::bigint AS lo, pos AS hi
),
chosen AS (
    SELECT t.* FROM tasks t
    WHERE t.done_on = 'infinity' AND t.id > (SELECT lo FROM cur) AND t.id <= (SELECT hi FROM cur)
      AND t.status = 'queued'
      AND $1::text IS NOT NULL AND $2::text[] IS NOT NULL AND $5::text[] IS NOT NULL
)
SELECT t.id, t.task_type, t.payload, t.priority, t.available_at, t.deadline_at, t.timeout_ms,
       t.attempt + 1 AS attempt, t.max_attempts, t.lease_epoch + 1 AS lease_epoch,
       statement_timestamp() + make_interval(secs => $4) AS lease_until, t.idempotency_key, t.result,
       t.last_error, t.created_at, t.finished_at, statement_timestamp() AS db_now,
       NULL::text[] AS rated,
       t.concurrency_key, t.snoozes, t.checkpoint, t.checkpoint_at
FROM chosen t
