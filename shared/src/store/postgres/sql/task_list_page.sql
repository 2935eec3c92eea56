-- The shared rest of the task_list*.sql statements (each supplies SELECT … WHERE <status>):
-- $2 type, $3 text in type / error code / error message (case-insensitive), $4 ids below (keyset
-- cursor), $5 page size, $6 exact error code, $7 finished (or last changed) at or after, $8 only
-- waiting tasks that are due (true) or not yet due (false; null: no such condition).
-- Newest first.
  AND ($2::text IS NULL OR t.task_type = $2)
  AND ($3::text IS NULL
       OR strpos(t.task_type, lower($3)) > 0
       OR strpos(lower(coalesce(t.last_error ->> 'code', '')), lower($3)) > 0
       OR strpos(lower(coalesce(t.last_error ->> 'message', '')), lower($3)) > 0)
  AND ($6::text IS NULL OR t.last_error ->> 'code' = $6)
  AND ($7::timestamptz IS NULL OR coalesce(t.finished_at, t.updated_at) >= $7)
  AND ($8::bool IS NULL
       OR (t.status IN ('queued', 'retry_wait') AND (t.available_at <= now()) = $8))
  -- A bound rather than an IS NULL test, so any plan can start the index scan at the cursor.
  AND t.id < coalesce($4::bigint, 9223372036854775807)
ORDER BY t.id DESC
LIMIT $5
