-- Up to ?4 waiting tasks due since before ?3 whose type no live agent serves, in claim order.
-- Live agents: not stopped, and their own liveness deadline is after now ?1; a row
-- without one (an agent from before it existed) is live while its registry heartbeat
-- is younger than ?2 microseconds.
SELECT id, task_type FROM tasks
WHERE status IN ('queued', 'retry_wait') AND available_at < ?3
  AND task_type NOT IN (
      SELECT DISTINCT j.value FROM agents a, json_each(a.task_types) j
      WHERE a.state <> 'stopped' AND coalesce(a.alive_until, a.heartbeat_at + ?2) > ?1)
ORDER BY priority DESC, available_at, id LIMIT ?4
