-- Cron schedules fired by the leader (issue 7): the missed-tick policy, what the last firing
-- enqueued (or why it could not), and the index the leader's firing pass reads. (SQLite adds
-- a column's CHECK with the column; the PostgreSQL migration's table checks are these.)
ALTER TABLE schedules ADD COLUMN missed TEXT NOT NULL DEFAULT 'skip'
    CONSTRAINT schedules_missed_name CHECK (missed IN ('skip', 'catch_up'));
ALTER TABLE schedules ADD COLUMN catch_up_max INTEGER NOT NULL DEFAULT 1
    CONSTRAINT schedules_missed_policy CHECK (
        (missed = 'skip' AND catch_up_max = 1)
        OR (missed = 'catch_up' AND catch_up_max BETWEEN 1 AND 1000));
ALTER TABLE schedules ADD COLUMN last_task_id INTEGER;
ALTER TABLE schedules ADD COLUMN last_error TEXT
    CONSTRAINT schedules_last_error_size CHECK (length(CAST(last_error AS BLOB)) <= 4000);

CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled;
