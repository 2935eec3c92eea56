-- The sampler's minutes from $1 on.
SELECT minute, id_mark, counted_at IS NOT NULL AS counted, depth_sampled
FROM queue_history_minutes
WHERE minute >= $1
ORDER BY minute
