-- The newest id mark of a minute before $1 (valid for every later minute).
SELECT minute, id_mark
FROM queue_history_minutes
WHERE minute < $1 AND id_mark IS NOT NULL
ORDER BY minute DESC
LIMIT 1
