-- Schedules inherit max attempts (issue 24): see the PostgreSQL migration of the same name.
--
-- SQLite cannot drop a NOT NULL in place: the table is rebuilt with every column, default and
-- CHECK it had (no trigger or view names it; its one index is dropped first and made again).
-- Every row is copied as it is, except a max_attempts of 25 (the old default), which becomes
-- NULL (inherit), as on PostgreSQL.
DROP INDEX schedules_due;
CREATE TABLE schedules_rebuilt (
    name          TEXT    PRIMARY KEY
        CONSTRAINT schedules_name_format CHECK (length(name) BETWEEN 1 AND 64
            AND substr(name, 1, 1) GLOB '[a-z0-9]' AND name NOT GLOB '*[^a-z0-9_.:-]*'),
    cron          TEXT    NOT NULL
        CONSTRAINT schedules_cron_size CHECK (length(CAST(cron AS BLOB)) BETWEEN 1 AND 200),
    timezone      TEXT    NOT NULL DEFAULT 'UTC',
    task_type     TEXT    NOT NULL
        CONSTRAINT schedules_type_format CHECK (length(task_type) BETWEEN 1 AND 64
            AND substr(task_type, 1, 1) GLOB '[a-z0-9]' AND task_type NOT GLOB '*[^a-z0-9_.:-]*'),
    payload       TEXT    NOT NULL DEFAULT '{}'
        CONSTRAINT schedules_payload_size CHECK (json_valid(payload) AND length(CAST(payload AS BLOB)) <= 1048576),
    priority      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NULL
        CONSTRAINT schedules_max_attempts_range CHECK (max_attempts IS NULL OR max_attempts BETWEEN 1 AND 1000),
    enabled       INTEGER NOT NULL DEFAULT 1,
    last_fired_at INTEGER,
    next_fire_at  INTEGER,
    created_at    INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    updated_at    INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    missed        TEXT    NOT NULL DEFAULT 'skip'
        CONSTRAINT schedules_missed_name CHECK (missed IN ('skip', 'catch_up')),
    catch_up_max  INTEGER NOT NULL DEFAULT 1
        CONSTRAINT schedules_missed_policy CHECK (
            (missed = 'skip' AND catch_up_max = 1)
            OR (missed = 'catch_up' AND catch_up_max BETWEEN 1 AND 1000)),
    last_task_id  INTEGER,
    last_error    TEXT
        CONSTRAINT schedules_last_error_size CHECK (length(CAST(last_error AS BLOB)) <= 4000)
);
INSERT INTO schedules_rebuilt (name, cron, timezone, task_type, payload, priority, max_attempts,
                               enabled, last_fired_at, next_fire_at, created_at, updated_at,
                               missed, catch_up_max, last_task_id, last_error)
SELECT name, cron, timezone, task_type, payload, priority, NULLIF(max_attempts, 25),
       enabled, last_fired_at, next_fire_at, created_at, updated_at,
       missed, catch_up_max, last_task_id, last_error
FROM schedules;
DROP TABLE schedules;
ALTER TABLE schedules_rebuilt RENAME TO schedules;
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled;
