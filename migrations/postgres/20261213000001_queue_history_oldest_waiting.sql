-- The depth sample keeps, per type, the available time of the longest-due task waiting just
-- after the minute ended (issue 22). The leader's unserved-type check
-- (task_dead_letter_unserved.sql) reads it: a type no agent serves whose waiting tasks only
-- fall due later (future run_at) no longer sends it walking the whole waiting queue every
-- housekeeping pass. NULL: unknown (rows sampled before this column, minutes without a depth)
-- or nothing waiting; the check then suspects the type as it did before.
ALTER TABLE queue_history ADD COLUMN oldest_waiting_at timestamptz NULL;
