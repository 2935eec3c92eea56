-- End attempts, one per element of ?1 (a JSON array of objects: id, status, available_at,
-- last_error, result, finished_at, snoozed, as decided from task_complete_read.sql); ?2 now.
-- A null available_at keeps the row's. A snooze gives its attempt back and counts one more.
UPDATE tasks SET status = j.status, available_at = coalesce(j.available_at, tasks.available_at),
       last_error = j.last_error, result = j.result, finished_at = j.finished_at,
       lease_until = NULL, updated_at = ?2,
       attempt = CASE WHEN j.snoozed THEN tasks.attempt - 1 ELSE tasks.attempt END,
       snoozes = CASE WHEN j.snoozed THEN tasks.snoozes + 1 ELSE tasks.snoozes END
FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.status') AS status,
             json_extract(value, '$.available_at') AS available_at,
             json_extract(value, '$.last_error') AS last_error,
             json_extract(value, '$.result') AS result,
             json_extract(value, '$.finished_at') AS finished_at,
             json_extract(value, '$.snoozed') AS snoozed
      FROM json_each(?1)) AS j
WHERE tasks.id = j.id
