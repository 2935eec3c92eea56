-- Whether any enabled schedule is due at now ?1 (one row) or not (none): an idle firing pass
-- reads it before it takes the write lock.
SELECT 1 FROM schedules WHERE enabled AND next_fire_at <= ?1 LIMIT 1
