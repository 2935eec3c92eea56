-- Dead-letter up to $3 waiting tasks, due for longer than $1 seconds, whose type no live agent
-- serves. An agent is live when it is not stopped and its own liveness deadline (alive_until,
-- set from its own lease TTL + grace by its heartbeat connection) has not passed; a row without
-- one (an agent from before it existed) is live while its registry heartbeat is younger than
-- $2 seconds. Does nothing while no agent is live: an empty fleet is an outage, not a verdict
-- on the tasks. Database time throughout.
--
-- No index finds waiting keyless tasks by type, so the search walks the waiting queue; the
-- leader's history sampler (queue_history, once a minute) says which types had tasks waiting or
-- running, and the walk is skipped, or kept to those types, when that word is good enough.
-- The depth of minute M is sampled after M + 1 minute, so every task it missed was created
-- after M + 1 minute; once M + 1 minute >= now - $1, such a task has not been due for $1
-- unless it was enqueued with an available time in the past, or its enqueue committed after
-- the sample though it began before, or it was waiting then and its available time was moved
-- earlier since (run now, an enqueue that replaced it) — each judged on the next sample, a
-- minute on (if the sampler has stopped, once its last sample is older than $1). With no such sample (no
-- sampler, a failing one, $1 shorter than the sample's age — 10 to 70 s and more — or a
-- sampled minute with no rows, as an empty queue leaves, or a pruning that stopped half-way)
-- every waiting task is looked at, as before. A type that sample saw waiting, whose
-- longest-due waiting task then (oldest_waiting_at) is due for $1 now, or saw running, and
-- that no agent serves brings the walk back; one whose waiting tasks all fall due later
-- (future run_at) does not until one of them is due for $1 (a sample's oldest_waiting_at
-- bounds the available time every task waiting then had; a task that was running then may
-- come back with any, so a running one keeps its type suspect).
WITH live AS (
    SELECT task_types FROM agents
    WHERE state <> 'stopped'
      AND coalesce(alive_until, heartbeat_at + make_interval(secs => $2)) > now()
),
served AS (
    SELECT DISTINCT unnest(task_types) AS task_type FROM live
),
sampled AS (
    SELECT max(minute) AS minute FROM queue_history_minutes WHERE depth_sampled
),
-- trusted: the last depth sample covers every task due for $1; suspects: the types it saw
-- running (a running task may come back to wait) or waiting with one due for $1 by now (no
-- oldest time: a row sampled before it was kept) that no live agent serves now.
gate AS (
    SELECT coalesce(s.minute + interval '1 minute' >= now() - make_interval(secs => $1), false)
           AND EXISTS (SELECT 1 FROM queue_history h WHERE h.minute = s.minute) AS trusted,
           (SELECT array_agg(h.task_type) FROM queue_history h
            WHERE h.minute = s.minute
              AND (h.running > 0
                   OR (h.waiting > 0
                       AND coalesce(h.oldest_waiting_at < now() - make_interval(secs => $1), true)))
              AND NOT EXISTS (SELECT 1 FROM served v WHERE v.task_type = h.task_type))
               AS suspects
    FROM sampled s
),
unserved AS (
    SELECT t.id FROM tasks t
    WHERE t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
      AND t.available_at < now() - make_interval(secs => $1)
      AND EXISTS (SELECT 1 FROM live)
      -- Without a suspect the walk does not start (a one-time filter).
      AND (NOT (SELECT trusted FROM gate) OR (SELECT suspects FROM gate) IS NOT NULL)
      AND (NOT (SELECT trusted FROM gate) OR t.task_type = ANY((SELECT suspects FROM gate)::text[]))
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
