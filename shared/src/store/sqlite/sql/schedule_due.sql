-- Enabled schedules whose next fire time has come by now ?1, earliest first, at most ?2.
SELECT s.*, NULL AS last_task_status FROM schedules s
WHERE s.enabled AND s.next_fire_at <= ?1
ORDER BY s.next_fire_at, s.name LIMIT ?2
