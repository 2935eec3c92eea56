-- Enabled schedules whose next fire time has come, earliest first, at most $1, locked for
-- the firing pass (a concurrent pass skips them rather than fire them twice).
SELECT s.*, NULL::text AS last_task_status
FROM schedules s
WHERE s.enabled AND s.next_fire_at <= now()
ORDER BY s.next_fire_at, s.name
LIMIT $1
FOR UPDATE SKIP LOCKED
