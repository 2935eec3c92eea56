-- The earliest next fire time of any enabled schedule (NULL: none). No parameters.
SELECT min(next_fire_at) FROM schedules WHERE enabled
