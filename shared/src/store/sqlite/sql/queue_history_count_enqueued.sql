-- Tasks created in [?2, ?3) by type and minute, through the primary key: every task created at
-- or after ?2 has an id above mark ?1.
SELECT task_type, (created_at / 60000000) * 60000000 AS minute, count(*) AS n
FROM tasks
WHERE id > ?1 AND created_at >= ?2 AND created_at < ?3
GROUP BY 1, 2
