-- Task ?1 given back by its holder: status ?2 (queued, or cancelled when its cancel was
-- requested), attempt ?3, due at now ?4, finished at ?5 (NULL unless cancelled).
UPDATE tasks SET status = ?2, attempt = ?3, available_at = ?4, lease_until = NULL,
       finished_at = ?5, updated_at = ?4
WHERE id = ?1
