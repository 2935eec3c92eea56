-- Writes one row: counts replace what was there (a pass recounts, never adds); a depth is kept
-- when this pass has none for the row.
INSERT INTO queue_history
    (task_type, minute, enqueued, succeeded, failed, dead_lettered, cancelled, waiting, running,
     oldest_waiting_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (task_type, minute) DO UPDATE
SET enqueued = excluded.enqueued,
    succeeded = excluded.succeeded,
    failed = excluded.failed,
    dead_lettered = excluded.dead_lettered,
    cancelled = excluded.cancelled,
    waiting = coalesce(excluded.waiting, queue_history.waiting),
    running = coalesce(excluded.running, queue_history.running),
    -- With the depth: a sample that saw nothing waiting writes NULL over an older value.
    oldest_waiting_at = CASE WHEN excluded.waiting IS NULL THEN queue_history.oldest_waiting_at
                             ELSE excluded.oldest_waiting_at END
