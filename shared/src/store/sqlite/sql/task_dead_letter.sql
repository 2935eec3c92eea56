-- Ends waiting task ?1 dead with error ?2 (JSON text) at now ?3.
UPDATE tasks SET status = 'dead', last_error = ?2, finished_at = ?3, updated_at = ?3
WHERE id = ?1
