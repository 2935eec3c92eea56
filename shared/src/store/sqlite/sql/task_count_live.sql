-- Tasks per waiting and running state for the console's Tasks view, exactly, at now ?1: ?2
-- type, ?3 text in type / error code / error message (case-insensitive, as task_list.sql), ?4
-- exact error code (NULL: any).
SELECT coalesce(sum(status = 'queued' AND available_at <= ?1), 0) AS queued,
       coalesce(sum(status = 'queued' AND available_at > ?1), 0) AS scheduled,
       coalesce(sum(status = 'retry_wait'), 0) AS retrying,
       coalesce(sum(status IN ('running', 'cancel_requested')), 0) AS running
FROM tasks t
WHERE status IN ('queued', 'retry_wait', 'running', 'cancel_requested')
  AND (?2 IS NULL OR t.task_type = ?2)
  AND (?3 IS NULL
       OR instr(t.task_type, lower(?3)) > 0
       OR instr(lower(coalesce(json_extract(t.last_error, '$.code'), '')), lower(?3)) > 0
       OR instr(lower(coalesce(json_extract(t.last_error, '$.message'), '')), lower(?3)) > 0)
  AND (?4 IS NULL OR json_extract(t.last_error, '$.code') = ?4)
