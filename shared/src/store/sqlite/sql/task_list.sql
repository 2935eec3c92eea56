-- A page of tasks, newest first, keyset-paged by id: ?1 statuses (JSON array, NULL: all),
-- ?2 type, ?3 text in type / error code / error message (case-insensitive), ?4 ids below,
-- ?5 page size, ?6 exact error code, ?7 finished (or last changed) at or after, ?8 only waiting
-- tasks that are due (1) or not yet due (0) by SQLite's clock (as db_now.sql reads it; NULL: no
-- such condition).
SELECT * FROM tasks t
WHERE (?1 IS NULL OR t.status IN (SELECT value FROM json_each(?1)))
  AND (?2 IS NULL OR t.task_type = ?2)
  AND (?3 IS NULL
       OR instr(t.task_type, lower(?3)) > 0
       OR instr(lower(coalesce(json_extract(t.last_error, '$.code'), '')), lower(?3)) > 0
       OR instr(lower(coalesce(json_extract(t.last_error, '$.message'), '')), lower(?3)) > 0)
  AND (?6 IS NULL OR json_extract(t.last_error, '$.code') = ?6)
  AND (?7 IS NULL OR coalesce(t.finished_at, t.updated_at) >= ?7)
  AND (?8 IS NULL
       OR (t.status IN ('queued', 'retry_wait')
           AND (t.available_at <= CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000) = ?8))
  AND t.id < coalesce(?4, 9223372036854775807)
ORDER BY t.id DESC LIMIT ?5
