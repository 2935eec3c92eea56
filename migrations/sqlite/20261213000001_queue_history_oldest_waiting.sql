-- The depth sample keeps, per type, the available time (µs since the epoch) of the
-- longest-due task waiting just after the minute ended: migrations/postgres/
-- 20261213000001_queue_history_oldest_waiting.sql, which says what reads it. NULL: unknown or
-- nothing waiting.
ALTER TABLE queue_history ADD COLUMN oldest_waiting_at INTEGER NULL;
