-- A new schedule: ?1 name, ?2 cron, ?3 time zone, ?4 task type, ?5 payload, ?6 priority,
-- ?7 max attempts (NULL: inherit the policy at each firing), ?8 enabled, ?9 missed,
-- ?10 catch-up max, ?12 next fire time, ?13 now
-- (?11 is schedule_update.sql's; both take the same parameters).
INSERT INTO schedules (name, cron, timezone, task_type, payload, priority, max_attempts,
                       enabled, missed, catch_up_max, next_fire_at, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?13, ?13)
