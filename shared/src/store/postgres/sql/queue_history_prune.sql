-- Deletes at most $2 history rows of minutes older than $1 seconds; retention repeats it until
-- a batch comes back short.
DELETE FROM queue_history
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM queue_history
    WHERE minute < now() - make_interval(secs => $1)
    LIMIT $2))
