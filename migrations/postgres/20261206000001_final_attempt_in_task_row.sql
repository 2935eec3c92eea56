-- A task's last attempt is recorded in its own row (issue 22: the cost of a completion).
--
-- Every completion used to insert an attempt row (a heap tuple and a primary-key entry: about a
-- third of a completion's WAL) although the task row it updates in the same statement already
-- holds everything that attempt was: its epoch, attempt number, holder, start and end. Now an
-- attempt that ends the task (succeeded, partially_succeeded, failed for good, cancelled) is
-- recorded by `tasks.final_outcome` alone; attempts the task outlives (a failure retried, a
-- release, a lease that expired) keep their rows. An operator requeue of a finished task first
-- writes its final attempt out as a row, so history is never rewritten.
--
-- `task_attempts` becomes a view over both, with the same columns as the table it replaces, so
-- readers (the stores, the CLI, operators' own queries) see every attempt as before; the rows
-- themselves live in `task_attempt_rows`.
--
-- Upgrading: instant (a rename, a column without default, a view); run it with agents of the
-- previous version stopped, as they write to `task_attempts` directly.

ALTER TABLE task_attempts RENAME TO task_attempt_rows;

-- A domain, not a table CHECK: PostgreSQL runs every table CHECK on every UPDATE of the row
-- (migration 20261201000001), a domain's only when the column is written.
CREATE DOMAIN leasehold_final_outcome AS text
    CONSTRAINT tasks_final_outcome_known
    CHECK (VALUE IN ('succeeded', 'partially_succeeded', 'failed', 'cancelled'));
ALTER TABLE tasks ADD COLUMN final_outcome leasehold_final_outcome;

CREATE VIEW task_attempts AS
SELECT task_id, epoch, attempt, agent, started_at, finished_at, outcome, error
FROM task_attempt_rows
UNION ALL
-- A task's final attempt, read from the task row. The failure that killed it is its last error.
SELECT id, lease_epoch, attempt, lease_owner, started_at, finished_at, final_outcome,
       CASE WHEN final_outcome = 'failed' THEN last_error END
FROM tasks
WHERE final_outcome IS NOT NULL;

CREATE OR REPLACE FUNCTION leasehold_delete_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_attempt_rows a USING deleted d WHERE a.task_id = d.id;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION leasehold_truncate_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE task_attempt_rows;
    RETURN NULL;
END
$$;
