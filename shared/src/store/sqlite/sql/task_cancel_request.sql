-- Operator cancel of running task ?1: cancel_requested at now ?2, for its holder to stop.
UPDATE tasks SET status = 'cancel_requested', updated_at = ?2 WHERE id = ?1
