-- One attempt row: ?1 task, ?2 epoch, ?3 attempt, ?4 agent, ?5 started at, ?6 finished at,
-- ?7 outcome, ?8 error (NULL: none).
INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, finished_at, outcome,
                           error)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
