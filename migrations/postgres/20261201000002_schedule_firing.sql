-- Cron schedules fired by the leader (issue 7): the missed-tick policy, what the last firing
-- enqueued (or why it could not), and the index the leader's firing pass reads.
ALTER TABLE schedules
    ADD COLUMN missed       text    NOT NULL DEFAULT 'skip',
    ADD COLUMN catch_up_max integer NOT NULL DEFAULT 1,
    ADD COLUMN last_task_id bigint,
    ADD COLUMN last_error   text,
    ADD CONSTRAINT schedules_missed_policy CHECK (
        (missed = 'skip' AND catch_up_max = 1)
        OR (missed = 'catch_up' AND catch_up_max BETWEEN 1 AND 1000)),
    ADD CONSTRAINT schedules_timezone_size CHECK (octet_length(timezone) BETWEEN 1 AND 64),
    ADD CONSTRAINT schedules_last_error_size CHECK (octet_length(last_error) <= 4000);

-- The leader's pass: enabled schedules by next fire time.
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE enabled;
