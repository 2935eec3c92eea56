-- The whole queue at a glance (store/stats.rs): ?1 now (µs). Live counts through the claim
-- and lease indexes, dead ones through tasks_dead_idx, the last hour's finishes through
-- tasks_finished_idx (finished_at in [now - 1 h, now]) and its failed attempts through
-- task_attempts_failed_idx (every attempt has a row here, the last one too): no scan of the
-- finished history. Each window is a filter of the hour's rows.
WITH live AS (
    SELECT coalesce(sum(status = 'queued' AND available_at <= ?1), 0) AS queued,
           coalesce(sum(status = 'queued' AND available_at > ?1), 0) AS scheduled,
           coalesce(sum(status = 'retry_wait'), 0) AS retrying,
           coalesce(sum(status IN ('running', 'cancel_requested')), 0) AS running,
           min(CASE WHEN status IN ('queued', 'retry_wait') AND available_at <= ?1
                    THEN available_at END) AS oldest_due
    FROM tasks WHERE status IN ('queued', 'retry_wait', 'running', 'cancel_requested')
), dead AS (
    SELECT count(*) AS dead FROM tasks WHERE status = 'dead'
), finished AS (
    SELECT
        coalesce(sum(ok AND finished_at >= ?1 - 60000000), 0) AS succeeded_1m,
        coalesce(sum(ok AND finished_at >= ?1 - 900000000), 0) AS succeeded_15m,
        coalesce(sum(ok), 0) AS succeeded_1h,
        coalesce(sum(status = 'dead' AND finished_at >= ?1 - 60000000), 0) AS dead_1m,
        coalesce(sum(status = 'dead' AND finished_at >= ?1 - 900000000), 0) AS dead_15m,
        coalesce(sum(status = 'dead'), 0) AS dead_1h,
        coalesce(sum(status = 'cancelled' AND finished_at >= ?1 - 60000000), 0) AS cancelled_1m,
        coalesce(sum(status = 'cancelled' AND finished_at >= ?1 - 900000000), 0) AS cancelled_15m,
        coalesce(sum(status = 'cancelled'), 0) AS cancelled_1h
    FROM (
        SELECT status, finished_at, status IN ('succeeded', 'partially_succeeded') AS ok
        FROM tasks
        WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
          AND finished_at >= ?1 - 3600000000 AND finished_at <= ?1
    )
), failed AS (
    SELECT
        coalesce(sum(finished_at >= ?1 - 60000000), 0) AS failed_1m,
        coalesce(sum(finished_at >= ?1 - 900000000), 0) AS failed_15m,
        count(*) AS failed_1h
    FROM task_attempts
    WHERE outcome = 'failed' AND finished_at >= ?1 - 3600000000 AND finished_at <= ?1
)
SELECT l.queued, l.scheduled, l.retrying, l.running, d.dead,
       (?1 - l.oldest_due) / 1000 AS oldest_waiting_ms,
       f.succeeded_1m, f.succeeded_15m, f.succeeded_1h,
       f.dead_1m, f.dead_15m, f.dead_1h,
       f.cancelled_1m, f.cancelled_15m, f.cancelled_1h,
       a.failed_1m, a.failed_15m, a.failed_1h
FROM live l, dead d, finished f, failed a
