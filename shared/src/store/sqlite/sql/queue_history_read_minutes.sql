-- The sampler's minutes in [?1, ?2).
SELECT minute, id_mark, counted_at IS NOT NULL AS counted, depth_sampled
FROM queue_history_minutes
WHERE minute >= ?1 AND minute < ?2
ORDER BY minute
