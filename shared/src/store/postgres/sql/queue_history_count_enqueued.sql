-- Tasks created in [$2, $3) by type and minute, read through the primary key: every task
-- created at or after $2 has an id above mark $1 (ids come from one sequence; created_at is the
-- creating transaction's start). No scan of the finished history: only ids above the mark.
SELECT task_type, date_bin(interval '1 minute', created_at, timestamptz '2000-01-01 00:00:00+00') AS minute, count(*) AS n
FROM tasks
WHERE id > $1 AND created_at >= $2 AND created_at < $3
GROUP BY 1, 2
