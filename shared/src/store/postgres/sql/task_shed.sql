-- Load shedding: cancel, with reason `shed`, up to $1 waiting tasks (queued, retry_wait) of the
-- types whose policy sets shed_after_ms and that became due longer ago than that (database
-- time). Keyless tasks: tasks_claim_idx is walked one priority at a time (a skip scan over the
-- priorities in use), each from its oldest due time up to the latest cutoff, so only overdue
-- waiting tasks are read. Tasks with a concurrency key: tasks_claim_key_idx is read over each
-- shedding type's keys, its due times checked in the index. Without a shedding type nothing is
-- read. Returns the shed tasks and their types.
WITH RECURSIVE shed AS (
    SELECT scope AS task_type, shed_after_ms FROM policies
    WHERE shed_after_ms IS NOT NULL AND scope <> '*'
),
cutoff AS (
    SELECT now() - make_interval(secs => min(shed_after_ms) / 1000.0) AS at FROM shed
),
prio AS (
    (SELECT priority FROM tasks
     WHERE done_on = 'infinity' AND status IN ('queued', 'retry_wait') AND concurrency_key IS NULL
       AND EXISTS (SELECT 1 FROM shed)
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.priority FROM tasks t
            WHERE t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.concurrency_key IS NULL
              AND t.priority < p.priority
            ORDER BY t.priority DESC LIMIT 1)
    FROM prio p
    WHERE p.priority IS NOT NULL
),
due AS (
    SELECT c.id, c.shed_after_ms
    FROM prio p
    CROSS JOIN LATERAL (
        SELECT t.id, s.shed_after_ms
        FROM tasks t JOIN shed s ON s.task_type = t.task_type
        WHERE t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait') AND t.concurrency_key IS NULL
          AND t.priority = p.priority
          AND t.available_at <= (SELECT at FROM cutoff)
          AND t.available_at <= now() - make_interval(secs => s.shed_after_ms / 1000.0)
        ORDER BY t.available_at, t.id
        LIMIT $1
    ) c
    WHERE p.priority IS NOT NULL
    UNION ALL
    SELECT k.id, s.shed_after_ms
    FROM shed s
    CROSS JOIN LATERAL (
        SELECT t.id FROM tasks t
        WHERE t.task_type = s.task_type AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
          AND t.concurrency_key IS NOT NULL
          AND t.available_at <= now() - make_interval(secs => s.shed_after_ms / 1000.0)
        LIMIT $1
    ) k
    LIMIT $1
),
-- Re-checked on the locked row: a task claimed and released, recovered or failed into
-- retry_wait since the walk above read it is waiting again but due anew, and stays.
locked AS (
    SELECT t.id, due.shed_after_ms FROM tasks t JOIN due ON due.id = t.id
    WHERE t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
      AND t.available_at <= now() - make_interval(secs => due.shed_after_ms / 1000.0)
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE tasks t
SET status = 'cancelled',
    last_error = jsonb_build_object(
        'code', 'shed',
        'message', format('waited %s s past its due time; type %s sheds after %s s',
                          round(extract(epoch FROM now() - t.available_at)::numeric, 1),
                          t.task_type, trim_scale(round(l.shed_after_ms / 1000.0, 3))),
        'retryable', false),
    finished_at = now(),
    done_on = (now() AT TIME ZONE 'UTC')::date,
    updated_at = now()
FROM locked l
WHERE t.id = l.id AND t.done_on = 'infinity' AND t.status IN ('queued', 'retry_wait')
  AND t.available_at <= now() - make_interval(secs => l.shed_after_ms / 1000.0)
RETURNING t.id, t.task_type
