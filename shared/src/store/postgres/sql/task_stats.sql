-- The whole queue at a glance (store/stats.rs): live counts now, and the last minute's,
-- quarter hour's and hour's finishes and failed attempts, windows ending at now(). Every part
-- reads an index, none the finished history as a whole:
-- * live: the claim indexes (keyless and keyed waiting) and the lease index of tasks_live, as
--   task_overview.sql; oldest_waiting_ms from the same rows (queued or retry_wait, due: what a
--   claim could take now).
-- * dead: the dead-letter index of every partition (tasks_all_dead_idx), as the overview.
-- * finished: tasks_all_finished_idx, the range finished_at in [now() - 1 hour, now()]: only
--   the last hour's finished rows, whatever the history holds; each window is a FILTER of it.
--   A task's last attempt is recorded in its own row (final_outcome, migration
--   20261206000001), so one that failed for good is counted here.
-- * retried: task_attempt_rows_failed_idx, the same range: the failed attempts a task outlived.
WITH live AS (
    SELECT count(*) FILTER (WHERE status = 'queued' AND available_at <= now()) AS queued,
           count(*) FILTER (WHERE status = 'queued' AND available_at > now()) AS scheduled,
           count(*) FILTER (WHERE status = 'retry_wait') AS retrying,
           count(*) FILTER (WHERE status IN ('running', 'cancel_requested')) AS running,
           min(available_at) FILTER (WHERE status IN ('queued', 'retry_wait')
                                       AND available_at <= now()) AS oldest_due
    FROM (
        SELECT status, available_at FROM tasks
        WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL
        UNION ALL
        SELECT status, available_at FROM tasks
        WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NOT NULL
        UNION ALL
        SELECT status, available_at FROM tasks
        WHERE status IN ('running', 'cancel_requested')
    ) w
), dead AS (
    SELECT count(*) AS dead FROM tasks WHERE status = 'dead'
), finished AS (
    SELECT
        count(*) FILTER (WHERE ok AND finished_at >= now() - interval '1 minute') AS succeeded_1m,
        count(*) FILTER (WHERE ok AND finished_at >= now() - interval '15 minutes') AS succeeded_15m,
        count(*) FILTER (WHERE ok) AS succeeded_1h,
        count(*) FILTER (WHERE status = 'dead' AND finished_at >= now() - interval '1 minute') AS dead_1m,
        count(*) FILTER (WHERE status = 'dead' AND finished_at >= now() - interval '15 minutes') AS dead_15m,
        count(*) FILTER (WHERE status = 'dead') AS dead_1h,
        count(*) FILTER (WHERE status = 'cancelled' AND finished_at >= now() - interval '1 minute') AS cancelled_1m,
        count(*) FILTER (WHERE status = 'cancelled' AND finished_at >= now() - interval '15 minutes') AS cancelled_15m,
        count(*) FILTER (WHERE status = 'cancelled') AS cancelled_1h,
        count(*) FILTER (WHERE failed AND finished_at >= now() - interval '1 minute') AS failed_1m,
        count(*) FILTER (WHERE failed AND finished_at >= now() - interval '15 minutes') AS failed_15m,
        count(*) FILTER (WHERE failed) AS failed_1h
    FROM (
        SELECT status, finished_at,
               status IN ('succeeded', 'partially_succeeded') AS ok,
               final_outcome IS NOT DISTINCT FROM 'failed' AS failed
        FROM tasks
        WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
          AND finished_at >= now() - interval '1 hour' AND finished_at <= now()
    ) f
), retried AS (
    SELECT
        count(*) FILTER (WHERE finished_at >= now() - interval '1 minute') AS failed_1m,
        count(*) FILTER (WHERE finished_at >= now() - interval '15 minutes') AS failed_15m,
        count(*) AS failed_1h
    FROM task_attempt_rows
    WHERE outcome = 'failed'
      AND finished_at >= now() - interval '1 hour' AND finished_at <= now()
)
SELECT l.queued, l.scheduled, l.retrying, l.running, d.dead,
       (extract(epoch FROM now() - l.oldest_due) * 1000)::bigint AS oldest_waiting_ms,
       f.succeeded_1m, f.succeeded_15m, f.succeeded_1h,
       f.dead_1m, f.dead_15m, f.dead_1h,
       f.cancelled_1m, f.cancelled_15m, f.cancelled_1h,
       f.failed_1m + r.failed_1m AS failed_1m,
       f.failed_15m + r.failed_15m AS failed_15m,
       f.failed_1h + r.failed_1h AS failed_1h,
       now() AS db_now
FROM live l, dead d, finished f, retried r
