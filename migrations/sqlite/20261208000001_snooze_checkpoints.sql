-- Snoozes and checkpoints (issue 24): see the PostgreSQL migration of the same name.
ALTER TABLE tasks ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN checkpoint TEXT NULL
    CONSTRAINT tasks_checkpoint_size
        CHECK (checkpoint IS NULL OR (json_valid(checkpoint) AND length(CAST(checkpoint AS BLOB)) <= 65536));
ALTER TABLE tasks ADD COLUMN checkpoint_at INTEGER NULL;

ALTER TABLE policies ADD COLUMN max_snoozes INTEGER NULL
    CONSTRAINT policies_max_snoozes_range CHECK (max_snoozes IS NULL OR max_snoozes BETWEEN 0 AND 1000000);

-- A snoozed attempt is recorded as `snoozed`. SQLite cannot change a CHECK in place: the table
-- is rebuilt (the trigger that names it and its index are dropped first and made again).
DROP TRIGGER tasks_delete_attempts;
DROP INDEX task_attempts_failed_idx;
CREATE TABLE task_attempts_rebuilt (
    task_id     INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    agent       TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    outcome     TEXT    NOT NULL
        CONSTRAINT task_attempts_outcome_known CHECK (outcome IN ('succeeded', 'partially_succeeded',
            'failed', 'cancelled', 'released', 'lease_expired', 'snoozed')),
    error       TEXT
        CONSTRAINT task_attempts_error_size CHECK (error IS NULL OR (json_valid(error) AND length(CAST(error AS BLOB)) <= 65536)),
    PRIMARY KEY (task_id, epoch)
) WITHOUT ROWID;
INSERT INTO task_attempts_rebuilt (task_id, epoch, attempt, agent, started_at, finished_at, outcome, error)
SELECT task_id, epoch, attempt, agent, started_at, finished_at, outcome, error FROM task_attempts;
DROP TABLE task_attempts;
ALTER TABLE task_attempts_rebuilt RENAME TO task_attempts;
CREATE INDEX task_attempts_failed_idx ON task_attempts (finished_at) WHERE outcome = 'failed';
CREATE TRIGGER tasks_delete_attempts AFTER DELETE ON tasks
BEGIN
    DELETE FROM task_attempts WHERE task_id = OLD.id;
END;
