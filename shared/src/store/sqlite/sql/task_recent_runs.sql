-- The run times of the successful runs of the types in ?1 (JSON array) among the newest ?2
-- finished tasks, newest first. The inner read walks tasks_finished_idx backwards (its
-- predicate is repeated here so the index applies) and stops after ?2 entries, so the read is
-- bounded however long the history is. The run is the task row's final attempt: claim to
-- completion (microseconds, as stored). The Store keeps the newest N of each type.
SELECT task_type, finished_at - started_at AS run_us
FROM (SELECT task_type, status, started_at, finished_at
      FROM tasks
      WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
      ORDER BY finished_at DESC
      LIMIT ?2) newest
WHERE status = 'succeeded' AND started_at IS NOT NULL AND finished_at >= started_at
  AND task_type IN (SELECT value FROM json_each(?1))
ORDER BY finished_at DESC
