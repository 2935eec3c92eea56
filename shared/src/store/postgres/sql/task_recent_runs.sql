-- The run times of the successful runs of the types in $1 (text[]) among the newest $2
-- finished tasks, newest first. The inner read walks tasks_finished_idx backwards (its
-- predicate is repeated here so the index applies) and stops after $2 entries, so the read is
-- bounded however long the history is, and needs no sort. The run is the task row's final
-- attempt: claim to completion, database clock. The Store keeps the newest N of each type.
SELECT task_type, (EXTRACT(EPOCH FROM finished_at - started_at) * 1000000)::bigint AS run_us
FROM (SELECT task_type, status, started_at, finished_at
      FROM tasks
      WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
      ORDER BY finished_at DESC
      LIMIT $2) newest
WHERE status = 'succeeded' AND started_at IS NOT NULL AND finished_at >= started_at
  AND task_type = ANY($1)
ORDER BY finished_at DESC
