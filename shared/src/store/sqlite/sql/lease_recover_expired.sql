-- Recover expired task ?1 (from lease_list_expired.sql): status ?2 (retry_wait, dead or
-- cancelled), epoch ?3, due at now ?4, last error ?5, finished at ?6 (NULL when it runs again).
UPDATE tasks SET status = ?2, lease_epoch = ?3, lease_until = NULL, available_at = ?4,
       last_error = ?5, finished_at = ?6, updated_at = ?4
WHERE id = ?1
