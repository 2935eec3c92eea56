-- Stores id mark ?2 for minute ?1 (read before ?1 began); a higher one replaces it.
INSERT INTO queue_history_minutes (minute, id_mark)
VALUES (?1, ?2)
ON CONFLICT (minute) DO UPDATE
SET id_mark = max(coalesce(queue_history_minutes.id_mark, excluded.id_mark), excluded.id_mark)
