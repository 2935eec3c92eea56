-- Deletes at most ?2 sampler minutes before ?1.
DELETE FROM queue_history_minutes
WHERE minute IN (SELECT minute FROM queue_history_minutes WHERE minute < ?1 ORDER BY minute LIMIT ?2)
