-- Enables or disables a schedule (?1, ?2); enabling sets the next fire time to ?3 (the first
-- tick after now: ticks that passed while it was disabled are not caught up); ?4 now.
UPDATE schedules SET enabled = ?2,
       next_fire_at = CASE WHEN ?2 THEN ?3 ELSE next_fire_at END, updated_at = ?4
WHERE name = ?1
