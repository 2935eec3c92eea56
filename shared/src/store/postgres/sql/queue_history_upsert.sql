-- Writes rows (arrays of equal length, one element per row): counts replace what was there
-- (a pass recounts a minute to the same value, never adds to it); a depth is kept when this
-- pass has none for the row.
INSERT INTO queue_history AS h
    (task_type, minute, enqueued, succeeded, failed, dead_lettered, cancelled, waiting, running,
     oldest_waiting_at)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[],
                     $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::timestamptz[])
ON CONFLICT (task_type, minute) DO UPDATE
SET enqueued = EXCLUDED.enqueued,
    succeeded = EXCLUDED.succeeded,
    failed = EXCLUDED.failed,
    dead_lettered = EXCLUDED.dead_lettered,
    cancelled = EXCLUDED.cancelled,
    waiting = coalesce(EXCLUDED.waiting, h.waiting),
    running = coalesce(EXCLUDED.running, h.running),
    -- With the depth: a sample that saw nothing waiting writes NULL over an older value.
    oldest_waiting_at = CASE WHEN EXCLUDED.waiting IS NULL THEN h.oldest_waiting_at
                             ELSE EXCLUDED.oldest_waiting_at END
