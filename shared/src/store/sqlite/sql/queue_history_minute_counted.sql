-- Marks minute ?1 counted at ?2, and depth-sampled when ?3.
INSERT INTO queue_history_minutes (minute, counted_at, depth_sampled)
VALUES (?1, ?2, ?3)
ON CONFLICT (minute) DO UPDATE
SET counted_at = excluded.counted_at,
    depth_sampled = queue_history_minutes.depth_sampled OR excluded.depth_sampled
