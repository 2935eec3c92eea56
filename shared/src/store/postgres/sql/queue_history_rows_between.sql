-- Stored rows of minutes [$1, $2), of type $3 (NULL: every type).
SELECT task_type, minute, enqueued, succeeded, failed, dead_lettered, cancelled, waiting, running,
       oldest_waiting_at
FROM queue_history
WHERE minute >= $1 AND minute < $2 AND ($3::text IS NULL OR task_type = $3)
ORDER BY minute, task_type
