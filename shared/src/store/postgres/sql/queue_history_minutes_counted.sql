-- Marks minutes $1 counted now; minute $2 (NULL: none) also depth-sampled.
INSERT INTO queue_history_minutes AS q (minute, counted_at, depth_sampled)
SELECT m, now(), m IS NOT DISTINCT FROM $2 FROM unnest($1::timestamptz[]) AS m
ON CONFLICT (minute) DO UPDATE
SET counted_at = EXCLUDED.counted_at,
    depth_sampled = q.depth_sampled OR EXCLUDED.depth_sampled
