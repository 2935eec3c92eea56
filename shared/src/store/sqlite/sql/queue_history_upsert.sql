-- Writes one row: counts replace what was there (a pass recounts, never adds); a depth is kept
-- when this pass has none for the row.
INSERT INTO queue_history
    (task_type, minute, enqueued, succeeded, failed, dead_lettered, cancelled, waiting, running)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (task_type, minute) DO UPDATE
SET enqueued = excluded.enqueued,
    succeeded = excluded.succeeded,
    failed = excluded.failed,
    dead_lettered = excluded.dead_lettered,
    cancelled = excluded.cancelled,
    waiting = coalesce(excluded.waiting, queue_history.waiting),
    running = coalesce(excluded.running, queue_history.running)
