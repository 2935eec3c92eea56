-- The attempts of task ?1, oldest epoch first.
SELECT task_id, epoch, attempt, agent, started_at, finished_at, outcome, error
FROM task_attempts WHERE task_id = ?1 ORDER BY epoch
