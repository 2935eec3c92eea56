-- The attempt rows of a batch of completions: ?1 a JSON array of objects (id, epoch, attempt,
-- agent, started_at, outcome, error); ?2 now, their end.
INSERT INTO task_attempts (task_id, epoch, attempt, agent, started_at, finished_at, outcome,
                           error)
SELECT json_extract(value, '$.id'), json_extract(value, '$.epoch'),
       json_extract(value, '$.attempt'), json_extract(value, '$.agent'),
       json_extract(value, '$.started_at'), ?2, json_extract(value, '$.outcome'),
       json_extract(value, '$.error')
FROM json_each(?1)
