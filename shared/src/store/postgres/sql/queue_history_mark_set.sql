-- Stores id mark $2 for minute $1 (read before $1 began); a higher mark read later (still
-- before $1) replaces it: the higher, the fewer ids the minute's count reads.
INSERT INTO queue_history_minutes (minute, id_mark)
VALUES ($1, $2)
ON CONFLICT (minute) DO UPDATE
SET id_mark = greatest(coalesce(queue_history_minutes.id_mark, EXCLUDED.id_mark), EXCLUDED.id_mark)
