-- Queue history (issue 26): the tables of migrations/postgres/20261211000001_queue_history.sql
-- (which explains them), in SQLite's terms: minutes are INTEGER microseconds since the Unix
-- epoch, UTC, a multiple of 60,000,000. tasks.id is AUTOINCREMENT, so ids are never reused and
-- a task created after the mark was read has an id above it (writers serialise on the write
-- lock, and the sampler reads the mark under it).

CREATE TABLE queue_history (
    task_type     TEXT    NOT NULL,
    minute        INTEGER NOT NULL
        CONSTRAINT queue_history_minute_whole CHECK (minute % 60000000 = 0),
    enqueued      INTEGER NOT NULL DEFAULT 0,
    succeeded     INTEGER NOT NULL DEFAULT 0,
    failed        INTEGER NOT NULL DEFAULT 0,
    dead_lettered INTEGER NOT NULL DEFAULT 0,
    cancelled     INTEGER NOT NULL DEFAULT 0,
    waiting       INTEGER NULL,
    running       INTEGER NULL,
    PRIMARY KEY (task_type, minute),
    CONSTRAINT queue_history_counts_not_negative CHECK (
        enqueued >= 0 AND succeeded >= 0 AND failed >= 0 AND dead_lettered >= 0 AND cancelled >= 0
        AND coalesce(waiting, 0) >= 0 AND coalesce(running, 0) >= 0)
);
CREATE INDEX queue_history_minute_idx ON queue_history (minute);

CREATE TABLE queue_history_minutes (
    minute        INTEGER PRIMARY KEY
        CONSTRAINT queue_history_minutes_minute_whole CHECK (minute % 60000000 = 0),
    id_mark       INTEGER NULL,
    counted_at    INTEGER NULL,
    depth_sampled INTEGER NOT NULL DEFAULT 0
        CONSTRAINT queue_history_minutes_depth_sampled_bool CHECK (depth_sampled IN (0, 1))
);
