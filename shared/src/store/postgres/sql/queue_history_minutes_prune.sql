-- Deletes at most $2 sampler minutes older than $1 seconds.
DELETE FROM queue_history_minutes
WHERE minute = ANY (ARRAY(
    SELECT minute FROM queue_history_minutes
    WHERE minute < now() - make_interval(secs => $1)
    ORDER BY minute
    LIMIT $2))
