-- After a firing pass fired ticks of schedule ?1: the last tick (?2, kept when none fired),
-- the next fire time (?3, NULL = never), the last task (?4, kept when none), its error (?5);
-- ?6 now.
UPDATE schedules SET last_fired_at = coalesce(?2, last_fired_at), next_fire_at = ?3,
       last_task_id = coalesce(?4, last_task_id), last_error = ?5, updated_at = ?6
WHERE name = ?1
