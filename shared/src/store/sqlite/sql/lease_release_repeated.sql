-- Did owner ?3 give task ?1 of epoch ?2 back already (released, or cancelled)? Read for a
-- release that changed nothing: a row means a repeat, none means fenced.
SELECT 1 FROM task_attempts
WHERE task_id = ?1 AND epoch = ?2 AND agent = ?3 AND outcome IN ('released', 'cancelled')
