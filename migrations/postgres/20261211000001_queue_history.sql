-- Queue history (issue 26): per task type and minute, what happened to the queue, kept by the
-- leader's sampler (agent/src/runtime/sampler.rs) so the console shows the last hour's trend
-- the moment it opens.
--
-- queue_history: one row per (task_type, minute) — minute is the start of a minute of the
-- database clock. Counts are of what happened within the minute: tasks enqueued (created_at),
-- tasks that succeeded (succeeded or partially_succeeded), failed attempts (every attempt that
-- ended in failure, retried or not), tasks dead-lettered and tasks cancelled (finished_at).
-- waiting (queued + retry_wait) and running (running + cancel_requested) are the depth sampled
-- just after the minute ended; NULL for a minute the sampler wrote later (backfilled after the
-- leader was away), when the depth at that time can no longer be known.
--
-- queue_history_minutes: one row per minute the sampler knows of.
--   id_mark: tasks_id_seq's value read before the minute began. Ids come from that sequence and
--     created_at is the creating transaction's start, so every task created within or after the
--     minute has an id above the mark: the minute's enqueues are counted through the primary
--     key (id > mark), never by scanning tasks (there is no index on created_at).
--   counted_at: when the sampler last wrote the minute's counts (NULL: not yet).
--   depth_sampled: whether the depths of the minute were sampled (a type with no row in a
--     sampled minute had none waiting or running).
--
-- Both tables are small (types x 1,440 rows a day) and the leader deletes rows older than a day.

CREATE TABLE queue_history (
    task_type     text        NOT NULL,
    minute        timestamptz NOT NULL
        CONSTRAINT queue_history_minute_whole CHECK (minute = date_bin(interval '1 minute', minute, timestamptz '2000-01-01 00:00:00+00')),
    enqueued      bigint      NOT NULL DEFAULT 0,
    succeeded     bigint      NOT NULL DEFAULT 0,
    failed        bigint      NOT NULL DEFAULT 0,
    dead_lettered bigint      NOT NULL DEFAULT 0,
    cancelled     bigint      NOT NULL DEFAULT 0,
    waiting       bigint      NULL,
    running       bigint      NULL,
    PRIMARY KEY (task_type, minute),
    CONSTRAINT queue_history_counts_not_negative CHECK (
        enqueued >= 0 AND succeeded >= 0 AND failed >= 0 AND dead_lettered >= 0 AND cancelled >= 0
        AND coalesce(waiting, 0) >= 0 AND coalesce(running, 0) >= 0)
);
-- Reads of every type (GetHistory without a type) and retention go by minute.
CREATE INDEX queue_history_minute_idx ON queue_history (minute);

CREATE TABLE queue_history_minutes (
    minute        timestamptz PRIMARY KEY
        CONSTRAINT queue_history_minutes_minute_whole CHECK (minute = date_bin(interval '1 minute', minute, timestamptz '2000-01-01 00:00:00+00')),
    id_mark       bigint      NULL,
    counted_at    timestamptz NULL,
    depth_sampled boolean     NOT NULL DEFAULT false
);
