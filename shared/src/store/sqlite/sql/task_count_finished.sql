-- Finished tasks in the statuses ?4 (JSON array: one state of the Tasks view) matching ?1 type,
-- ?2 text, ?3 exact error code (as task_count_live.sql), counting at most ?5 rows (the caller
-- asks for one past its cap, so a full count means "more").
SELECT count(*) AS n FROM (
    SELECT 1 FROM tasks t
    WHERE t.status IN (SELECT value FROM json_each(?4))
      AND (?1 IS NULL OR t.task_type = ?1)
      AND (?2 IS NULL
           OR instr(t.task_type, lower(?2)) > 0
           OR instr(lower(coalesce(json_extract(t.last_error, '$.code'), '')), lower(?2)) > 0
           OR instr(lower(coalesce(json_extract(t.last_error, '$.message'), '')), lower(?2)) > 0)
      AND (?3 IS NULL OR json_extract(t.last_error, '$.code') = ?3)
    LIMIT ?5
)
