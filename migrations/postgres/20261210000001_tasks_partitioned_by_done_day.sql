-- A small hot table (issue 25): finished tasks leave the rows that claims, renewals and vacuum
-- work on. `tasks` becomes a table partitioned by LIST (done_on):
--
-- * `tasks_live` (done_on = 'infinity'): every task not finished — waiting, running, retrying.
--   Claims, renewals, completions and recovery name `done_on = 'infinity'` and so plan against
--   this partition alone; autovacuum of it never reads a finished row or an index entry of one.
-- * `tasks_done_YYYYMMDD` (done_on = the UTC day the task finished): one per day, attached ahead
--   of time by the leader (leasehold_tasks_done_partition below). Retention drops a whole day
--   once every row in it is past retention: no row-by-row DELETE, no vacuum of history.
-- * `tasks_done_kept` (done_on = '-infinity'): tasks of a dropped day kept longer than the rest
--   of it — dead tasks, whose retention (30 days by default) outlasts the others' (7) — few
--   rows, deleted one by one at their own retention.
-- * `tasks_done_default`: a finished day with no partition of its own (the leader was away for
--   days); retention deletes from it row by row.
--
-- A task that finishes moves from tasks_live to its day's partition in the UPDATE that finishes
-- it (PostgreSQL moves a row whose partition key changes), and a requeue moves it back. Reads by
-- id, listings and `tasks show` read the parent and so still find finished tasks. One logical
-- table keeps every statement, the task_attempts view and plain SQL enqueues as they were.
--
-- What partitioning changes, and how the store deals with it:
-- * The primary key is (id, done_on) (a partitioned table's unique indexes must contain the
--   partition key); ids still come from one sequence, so they stay unique.
-- * The idempotency key is unique per partition; `ON CONFLICT (idempotency_key, done_on)` finds
--   a live holder, and the enqueue statements look for a finished holder first. The trigger
--   below refuses an insert whose key a finished task holds (the plain INSERT of another
--   language, and the enqueue that raced the holder's move: the store tries that one again).
-- * A statement that waited on a row another transaction moved gets SQLSTATE 40001 ("tuple to
--   be locked was already moved to another partition") instead of finding no row; the store
--   repeats such a statement or transaction.
--
-- Upgrading rewrites `tasks` (every row is copied into the new table) under an exclusive lock:
-- stop the agents, run `leasehold-agent migrate`, start them.

DROP VIEW task_attempts;
ALTER TABLE tasks RENAME TO tasks_unpartitioned;

CREATE TABLE tasks (
    LIKE tasks_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE,
    done_on date NOT NULL DEFAULT 'infinity'
) PARTITION BY LIST (done_on);

-- The identity column becomes a plain sequence default: a partitioned table's identity is not
-- used by an INSERT into a partition, a default is.
CREATE SEQUENCE tasks_id_seq_new;
SELECT setval('tasks_id_seq_new', last_value, is_called) FROM tasks_id_seq;
ALTER TABLE tasks ALTER COLUMN id SET DEFAULT nextval('tasks_id_seq_new');

CREATE TABLE tasks_live PARTITION OF tasks FOR VALUES IN ('infinity') WITH (fillfactor = 80);
CREATE TABLE tasks_done_kept PARTITION OF tasks FOR VALUES IN ('-infinity');
CREATE TABLE tasks_done_default PARTITION OF tasks DEFAULT;

-- The partition of finished day `day`, created on its own and then attached: ATTACH takes a
-- SHARE UPDATE EXCLUSIVE lock on tasks (CREATE TABLE … PARTITION OF would take an exclusive
-- one, waiting for and then blocking every claim). The CHECK lets ATTACH skip scanning the new
-- table. A day whose rows already went to the default partition keeps them there (attaching
-- would fail on them). Returns whether it created the partition.
--
-- This and leasehold_tasks_done_drop run with the rights of the tables' owner (SECURITY
-- DEFINER): agents connect as a role that may not create or drop tables
-- (deploy/postgres/agent-role.sql grants it EXECUTE on these two, nothing more). Neither can do
-- more than the role's DELETE on tasks already could: this one only adds a partition for a day
-- at most a week ahead.
CREATE FUNCTION leasehold_tasks_done_partition(day date) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    name text := 'tasks_done_' || to_char(day, 'YYYYMMDD');
BEGIN
    IF day IN ('infinity'::date, '-infinity'::date)
       OR day > (now() AT TIME ZONE 'UTC')::date + 7 THEN
        RAISE EXCEPTION 'not a day to make a partition of finished tasks for: %', day;
    END IF;
    IF to_regclass(name) IS NOT NULL THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM tasks_done_default WHERE done_on = day) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE tasks INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)', name);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (done_on = %L::date)', name, name || '_day', day);
    EXECUTE format('ALTER TABLE tasks ATTACH PARTITION %I FOR VALUES IN (%L)', name, day);
    RETURN true;
END
$$;

-- Retention of day `day` for tasks of `statuses` kept `older_than` seconds: when the whole day
-- is past that, its tasks of other statuses move to tasks_done_kept (to be deleted at their own
-- retention), their attempts' rows are deleted, and the partition is dropped. Returns how many
-- tasks it dropped; 0 with nothing done when the day is not due or has no partition. Dropping
-- takes an exclusive lock on tasks for an instant, after the slow part: the caller sets a
-- lock_timeout and tries again later when it cannot have it.
CREATE FUNCTION leasehold_tasks_done_drop(day date, statuses text[], older_than double precision)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    name text := 'tasks_done_' || to_char(day, 'YYYYMMDD');
    dropped bigint;
BEGIN
    IF to_regclass(name) IS NULL
       OR (day + 1)::timestamp AT TIME ZONE 'UTC' > now() - make_interval(secs => older_than) THEN
        RETURN 0;
    END IF;
    UPDATE tasks SET done_on = '-infinity'
    WHERE done_on = day AND NOT (status = ANY(statuses));
    EXECUTE format('DELETE FROM task_attempt_rows a USING %I p WHERE a.task_id = p.id', name);
    EXECUTE format('SELECT count(*) FROM %I', name) INTO dropped;
    EXECUTE format('DROP TABLE %I', name);
    RETURN dropped;
END
$$;

REVOKE EXECUTE ON FUNCTION leasehold_tasks_done_partition(date) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION leasehold_tasks_done_drop(date, text[], double precision) FROM PUBLIC;

-- Partitions for every day the existing finished rows finished on, and today and the next two.
SELECT leasehold_tasks_done_partition(d)
FROM (
    SELECT DISTINCT (coalesce(finished_at, updated_at) AT TIME ZONE 'UTC')::date AS d
    FROM tasks_unpartitioned
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
    UNION
    SELECT ((now() AT TIME ZONE 'UTC')::date + n) FROM generate_series(0, 2) AS n
) days;

INSERT INTO tasks
SELECT o.*,
       CASE WHEN o.status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
            THEN (coalesce(o.finished_at, o.updated_at) AT TIME ZONE 'UTC')::date
            ELSE 'infinity'::date END
FROM tasks_unpartitioned o;

DROP TABLE tasks_unpartitioned;
ALTER SEQUENCE tasks_id_seq_new RENAME TO tasks_id_seq;
ALTER SEQUENCE tasks_id_seq OWNED BY tasks.id;

-- Indexes. tasks_live's own indexes keep the names the unpartitioned table's had, so plans of the
-- hot path read as before; the parent's index of the same definition adopts them and creates
-- its twin on every other partition (the partial ones of waiting or running rows stay empty
-- there).
ALTER TABLE tasks_live ADD CONSTRAINT tasks_pkey PRIMARY KEY (id, done_on);
ALTER TABLE tasks ADD CONSTRAINT tasks_all_pkey PRIMARY KEY (id, done_on);

CREATE INDEX tasks_claim_idx ON tasks_live (priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL;
CREATE INDEX tasks_all_claim_idx ON tasks (priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL;
CREATE INDEX tasks_claim_key_idx ON tasks_live (task_type, concurrency_key, priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_all_claim_key_idx ON tasks (task_type, concurrency_key, priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_leased_type_idx ON tasks_live (task_type, concurrency_key)
    WHERE status IN ('running', 'cancel_requested');
CREATE INDEX tasks_all_leased_type_idx ON tasks (task_type, concurrency_key)
    WHERE status IN ('running', 'cancel_requested');
CREATE INDEX tasks_deadline_idx ON tasks_live (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'retry_wait');
CREATE INDEX tasks_all_deadline_idx ON tasks (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'retry_wait');
CREATE INDEX tasks_dead_idx ON tasks_live (id) WHERE status = 'dead';
CREATE INDEX tasks_all_dead_idx ON tasks (id) WHERE status = 'dead';
CREATE INDEX tasks_finished_idx ON tasks_live (finished_at)
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead');
CREATE INDEX tasks_all_finished_idx ON tasks (finished_at)
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead');
CREATE INDEX tasks_failed_idx ON tasks_live (task_type, finished_at) WHERE final_outcome = 'failed';
CREATE INDEX tasks_all_failed_idx ON tasks (task_type, finished_at) WHERE final_outcome = 'failed';
CREATE UNIQUE INDEX tasks_idempotency_key_idx ON tasks_live (idempotency_key, done_on)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX tasks_all_idempotency_key_idx ON tasks (idempotency_key, done_on)
    WHERE idempotency_key IS NOT NULL;

-- An idempotency key is held by one task, live or finished. The unique index sees one
-- partition; this sees the others. It runs only for a keyed row, after the statement, and its
-- query takes a new snapshot, so it also sees a holder whose move to a finished partition
-- committed while the insert waited on the holder's live index entry.
-- It reads with the owner's rights, so a role that may only INSERT INTO tasks still enqueues.
CREATE FUNCTION leasehold_idempotency_key_finished_holder() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    holder bigint;
BEGIN
    SELECT id INTO holder FROM tasks
    WHERE idempotency_key = NEW.idempotency_key AND done_on <> 'infinity' AND id <> NEW.id
    LIMIT 1;
    IF holder IS NOT NULL THEN
        RAISE EXCEPTION 'idempotency key "%" is held by finished task %', NEW.idempotency_key, holder
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'tasks_idempotency_key_done',
                  TABLE = 'tasks';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_live_idempotency_key AFTER INSERT ON tasks_live
    FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION leasehold_idempotency_key_finished_holder();

CREATE TRIGGER tasks_notify_insert AFTER INSERT ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_tasks();
CREATE TRIGGER tasks_delete_attempts AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_delete_attempts();
CREATE TRIGGER tasks_truncate_attempts BEFORE TRUNCATE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_truncate_attempts();

CREATE VIEW task_attempts AS
SELECT task_id, epoch, attempt, agent, started_at, finished_at, outcome, error
FROM task_attempt_rows
UNION ALL
-- A task's final attempt, read from the task row. The failure that killed it is its last error.
SELECT id, lease_epoch, attempt, lease_owner, started_at, finished_at, final_outcome,
       CASE WHEN final_outcome = 'failed' THEN last_error END
FROM tasks
WHERE final_outcome IS NOT NULL;

ANALYZE tasks;
