-- Overwrites a schedule's definition (?1 names it; ?2..?10 as in schedule_insert.sql); ?11
-- true resets the next fire time to ?12 (the ticks changed) and clears the last error, false
-- keeps them; ?13 now.
UPDATE schedules SET cron = ?2, timezone = ?3, task_type = ?4, payload = ?5,
       priority = ?6, max_attempts = ?7, enabled = ?8, missed = ?9, catch_up_max = ?10,
       next_fire_at = CASE WHEN ?11 THEN ?12 ELSE next_fire_at END,
       last_error = CASE WHEN ?11 THEN NULL ELSE last_error END, updated_at = ?13
WHERE name = ?1
