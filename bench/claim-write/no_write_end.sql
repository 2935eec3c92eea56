-- The end of the "range only" claim (bench/claim-write.sh; a DIAGNOSIS, never shipped): the
-- range's rows read as they are, no task row written. The lease the agent is told of
-- (epoch + 1, lease_until) exists nowhere in the database, so this variant's completion checks
-- no fence. What it shows: the drain with everything a claim does per task taken away.
SELECT t.id, t.task_type, t.payload, t.priority, t.available_at, t.deadline_at, t.timeout_ms,
       t.attempt + 1 AS attempt, t.max_attempts, t.lease_epoch + 1 AS lease_epoch,
       statement_timestamp() + make_interval(secs => $4) AS lease_until, t.idempotency_key, t.result,
       t.last_error, t.created_at, t.finished_at, statement_timestamp() AS db_now,
       NULL::text[] AS rated,
       t.concurrency_key, t.snoozes, t.checkpoint, t.checkpoint_at
FROM chosen t
