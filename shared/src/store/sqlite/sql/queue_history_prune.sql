-- Deletes at most ?2 history rows of minutes before ?1.
DELETE FROM queue_history
WHERE rowid IN (SELECT rowid FROM queue_history WHERE minute < ?1 LIMIT ?2)
