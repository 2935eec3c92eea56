-- Dead-letter up to $3 waiting tasks, due for longer than $1 seconds, whose type no live agent
-- serves. An agent is live when it is not stopped and its own liveness deadline (alive_until,
-- set from its own lease TTL + grace by its heartbeat connection) has not passed; a row without
-- one (an agent from before it existed) is live while its registry heartbeat is younger than
-- $2 seconds. Does nothing while no agent is live: an empty fleet is an outage, not a verdict
-- on the tasks. Database time throughout.
WITH live AS (
    SELECT task_types FROM agents
    WHERE state <> 'stopped'
      AND coalesce(alive_until, heartbeat_at + make_interval(secs => $2)) > now()
),
served AS (
    SELECT DISTINCT unnest(task_types) AS task_type FROM live
),
unserved AS (
    SELECT t.id FROM tasks t
    WHERE t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
      AND t.available_at < now() - make_interval(secs => $1)
      AND EXISTS (SELECT 1 FROM live)
      AND NOT EXISTS (SELECT 1 FROM served s WHERE s.task_type = t.task_type)
    ORDER BY t.priority DESC, t.available_at, t.id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE tasks t
SET status = 'dead',
    last_error = jsonb_build_object(
        'code', 'unknown_type',
        'message', format('no running agent handles task type %s', t.task_type),
        'retryable', false),
    finished_at = now(),
    done_on = (now() AT TIME ZONE 'UTC')::date,
    updated_at = now()
FROM unserved
WHERE t.id = unserved.id AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
RETURNING t.id, t.task_type
