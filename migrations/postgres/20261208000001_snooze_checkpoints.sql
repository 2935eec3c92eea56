-- Snoozes and checkpoints (issue 24).
--
-- A handler may snooze its task ("run me again in D") without using an attempt: the attempt it
-- ran is recorded as `snoozed`, the task waits again (`queued`, due at now + D) with its attempt
-- count as it was before the claim, and `snoozes` counts how often it happened. A type's
-- `max_snoozes` (inherited from the global row, 100 when neither sets it) caps them: the snooze
-- past the cap dead-letters the task (`snooze_limit`), so nothing snoozes forever unnoticed.
--
-- A handler may also save a small JSON checkpoint of its progress, fenced like every holder
-- write; the next attempt (after a failure, a lost lease, a release or a snooze) receives it.
--
-- Upgrading: instant (columns without volatile defaults; a widened CHECK validated once).
CREATE DOMAIN leasehold_checkpoint AS jsonb
    CONSTRAINT tasks_checkpoint_size CHECK (octet_length(VALUE::text) <= 65536);
ALTER TABLE tasks
    ADD COLUMN snoozes integer NOT NULL DEFAULT 0,
    ADD COLUMN checkpoint leasehold_checkpoint,
    ADD COLUMN checkpoint_at timestamptz;

ALTER TABLE policies
    ADD COLUMN max_snoozes integer,
    ADD CONSTRAINT policies_max_snoozes_range
        CHECK (max_snoozes IS NULL OR max_snoozes BETWEEN 0 AND 1000000);

ALTER TABLE task_attempt_rows
    DROP CONSTRAINT task_attempts_outcome_known,
    ADD CONSTRAINT task_attempts_outcome_known CHECK (outcome IN ('succeeded', 'partially_succeeded',
        'failed', 'cancelled', 'released', 'lease_expired', 'snoozed')) NOT VALID;
ALTER TABLE task_attempt_rows VALIDATE CONSTRAINT task_attempts_outcome_known;
