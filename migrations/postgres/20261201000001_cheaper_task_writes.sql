-- Cheaper writes of task rows, same rules.
--
-- 1. A value's own rules move from table CHECK constraints into domains. PostgreSQL evaluates
--    every table CHECK on every UPDATE, whatever columns it sets: a claim or a completion
--    re-ran the task-type regex and printed the whole payload as text to measure it, once per
--    row per state change (about a fifth of a claim's database time with an empty payload, more
--    with real ones). A domain's check runs only when a value is written to that column, so
--    each value is checked exactly when it is written. The domain constraints keep the table
--    constraints' names, so a refusal still names what was refused. Rules that relate two
--    columns stay table CHECKs (they are cheap comparisons).
-- 2. Half of each page is left free (fillfactor 50, was 80). A task row gets a new version at
--    claim and another at completion; with room on its own page the new version stays there,
--    which saves locating and dirtying a second page and the extra WAL record PostgreSQL
--    writes when an update moves a row across pages, and lets heartbeat renewals stay HOT.
--
-- Upgrading: changing the columns' types rewrites `tasks` and its indexes under an exclusive
-- lock (which also applies the new fill to every page). On a large table that blocks every
-- agent for the duration — their renewals time out and they stop their tasks — so run it with
-- the agents stopped. The statistics are rebuilt at the end.

CREATE DOMAIN leasehold_task_type AS text
    CONSTRAINT tasks_type_format CHECK (VALUE ~ '^[a-z0-9][a-z0-9_.:-]{0,63}$');
CREATE DOMAIN leasehold_task_status AS text
    CONSTRAINT tasks_status_known CHECK (VALUE IN ('queued', 'running', 'retry_wait',
        'cancel_requested', 'succeeded', 'partially_succeeded', 'cancelled', 'dead'));
CREATE DOMAIN leasehold_payload AS jsonb
    CONSTRAINT tasks_payload_size CHECK (octet_length(VALUE::text) <= 1048576);
CREATE DOMAIN leasehold_timeout_ms AS bigint
    CONSTRAINT tasks_timeout_range CHECK (VALUE BETWEEN 1 AND 604800000);
CREATE DOMAIN leasehold_attempt AS integer
    CONSTRAINT tasks_attempt_range CHECK (VALUE >= 0);
CREATE DOMAIN leasehold_max_attempts AS integer
    CONSTRAINT tasks_max_attempts_range CHECK (VALUE BETWEEN 1 AND 1000);
CREATE DOMAIN leasehold_lease_epoch AS bigint
    CONSTRAINT tasks_lease_epoch_range CHECK (VALUE >= 0);
CREATE DOMAIN leasehold_lease_owner AS text
    CONSTRAINT tasks_lease_owner_size CHECK (octet_length(VALUE) BETWEEN 1 AND 200);
CREATE DOMAIN leasehold_idempotency_key AS text
    CONSTRAINT tasks_idempotency_key_size CHECK (octet_length(VALUE) BETWEEN 1 AND 255);
CREATE DOMAIN leasehold_progress AS jsonb
    CONSTRAINT tasks_progress_size CHECK (octet_length(VALUE::text) <= 4096);
CREATE DOMAIN leasehold_result AS jsonb
    CONSTRAINT tasks_result_size CHECK (octet_length(VALUE::text) <= 1048576);
CREATE DOMAIN leasehold_last_error AS jsonb
    CONSTRAINT tasks_last_error_size CHECK (octet_length(VALUE::text) <= 65536);

ALTER TABLE tasks
    DROP CONSTRAINT tasks_type_format,
    DROP CONSTRAINT tasks_status_known,
    DROP CONSTRAINT tasks_payload_size,
    DROP CONSTRAINT tasks_timeout_range,
    DROP CONSTRAINT tasks_attempt_range,
    DROP CONSTRAINT tasks_max_attempts_range,
    DROP CONSTRAINT tasks_lease_epoch_range,
    DROP CONSTRAINT tasks_lease_owner_size,
    DROP CONSTRAINT tasks_idempotency_key_size,
    DROP CONSTRAINT tasks_progress_size,
    DROP CONSTRAINT tasks_result_size,
    DROP CONSTRAINT tasks_last_error_size,
    ALTER COLUMN task_type TYPE leasehold_task_type,
    ALTER COLUMN status TYPE leasehold_task_status,
    ALTER COLUMN payload TYPE leasehold_payload,
    ALTER COLUMN timeout_ms TYPE leasehold_timeout_ms,
    ALTER COLUMN attempt TYPE leasehold_attempt,
    ALTER COLUMN max_attempts TYPE leasehold_max_attempts,
    ALTER COLUMN lease_epoch TYPE leasehold_lease_epoch,
    ALTER COLUMN lease_owner TYPE leasehold_lease_owner,
    ALTER COLUMN idempotency_key TYPE leasehold_idempotency_key,
    ALTER COLUMN progress TYPE leasehold_progress,
    ALTER COLUMN result TYPE leasehold_result,
    ALTER COLUMN last_error TYPE leasehold_last_error,
    SET (fillfactor = 50);

ANALYZE tasks;
