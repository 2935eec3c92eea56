-- Tasks finished in [$1, $2) by type, minute and how, through tasks_all_finished_idx (a range
-- of finished_at on each partition). A task that failed for good (final_outcome 'failed') is
-- also a failed attempt: its last.
SELECT task_type, date_bin(interval '1 minute', finished_at, timestamptz '2000-01-01 00:00:00+00') AS minute,
       count(*) FILTER (WHERE status IN ('succeeded', 'partially_succeeded')) AS succeeded,
       count(*) FILTER (WHERE status = 'dead') AS dead_lettered,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE final_outcome = 'failed') AS failed
FROM tasks
WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
  AND finished_at >= $1 AND finished_at < $2
GROUP BY 1, 2
