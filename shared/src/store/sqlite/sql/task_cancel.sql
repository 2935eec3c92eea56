-- Operator cancel of waiting task ?1: it ends cancelled at now ?2.
UPDATE tasks SET status = 'cancelled', finished_at = ?2, updated_at = ?2
WHERE id = ?1
