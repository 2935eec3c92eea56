-- A new schedule; nothing when the name was taken meanwhile (the caller looks again).
INSERT INTO schedules (name, cron, timezone, task_type, payload, priority, max_attempts,
                       enabled, missed, catch_up_max, next_fire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO NOTHING
RETURNING name
