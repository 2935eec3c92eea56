-- The earliest next fire time of any enabled schedule, and now.
SELECT (SELECT min(next_fire_at) FROM schedules WHERE enabled) AS next_due, now() AS now
