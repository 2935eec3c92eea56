-- The work of task types ?3 (JSON array) as it stands at now ?1 (`--exit-when-idle`), one row
-- per kind, status and type, with the count and the ids (cut to the limit by the caller); the
-- branches and their meaning are those of postgres/sql/task_idle_report.sql:
--   pending      of ?3: queued, retry_wait, running, cancel_requested
--   ended_badly  of ?3: dead or cancelled, created or finished within ?4 (NULL: ever)
--   unserved     of other types: waiting, and no live agent serves the type
-- Live agents: not stopped, and their own liveness deadline is after now ?1; a row
-- without one (an agent from before it existed) is live while its registry heartbeat
-- is younger than ?2 microseconds.
WITH ours AS (SELECT value AS task_type FROM json_each(?3)),
     served AS (SELECT DISTINCT j.value AS task_type
                FROM agents a, json_each(a.task_types) j
                WHERE a.state <> 'stopped' AND coalesce(a.alive_until, a.heartbeat_at + ?2) > ?1),
     picked AS (
  SELECT 'pending' AS kind, t.id, t.status, t.task_type FROM tasks t
  WHERE t.status IN ('queued', 'retry_wait', 'running', 'cancel_requested')
    AND t.task_type IN (SELECT task_type FROM ours)
  UNION ALL
  SELECT 'ended_badly', t.id, t.status, t.task_type FROM tasks t
  WHERE t.status IN ('dead', 'cancelled')
    AND t.task_type IN (SELECT task_type FROM ours)
    AND (?4 IS NULL OR t.created_at >= ?1 - ?4 OR t.finished_at >= ?1 - ?4)
  UNION ALL
  SELECT 'unserved', t.id, t.status, t.task_type FROM tasks t
  WHERE t.status IN ('queued', 'retry_wait')
    AND t.task_type NOT IN (SELECT task_type FROM ours)
    AND t.task_type NOT IN (SELECT task_type FROM served))
SELECT kind, status, task_type, count(*) AS n, json_group_array(id) AS ids
FROM (SELECT * FROM picked ORDER BY id)
GROUP BY kind, status, task_type ORDER BY kind, status, task_type
