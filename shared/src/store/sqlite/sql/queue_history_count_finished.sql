-- Tasks finished in [?1, ?2) by type, minute and how, through tasks_finished_idx.
SELECT task_type, (finished_at / 60000000) * 60000000 AS minute,
       sum(status IN ('succeeded', 'partially_succeeded')) AS succeeded,
       sum(status = 'dead') AS dead_lettered,
       sum(status = 'cancelled') AS cancelled
FROM tasks
WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
  AND finished_at >= ?1 AND finished_at < ?2
GROUP BY 1, 2
