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

-- The rights other roles hold on what this replaces (the agents' role of
-- deploy/postgres/agent-role.sql above all), given again at the end on the new objects.
CREATE TEMP TABLE leasehold_old_grants AS
SELECT c.relname::text AS rel,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee,
       a.privilege_type AS privilege
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.oid IN ('tasks'::regclass, 'task_attempts'::regclass, 'tasks_id_seq'::regclass)
  AND a.grantee <> c.relowner;

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

-- Half of each page left free, as migration 20261201000001 set for tasks: a claim's and a
-- completion's new row versions stay on their page (HOT).
CREATE TABLE tasks_live PARTITION OF tasks FOR VALUES IN ('infinity') WITH (fillfactor = 50);
-- Only finished tasks outside tasks_live: a plain UPDATE that would make one waiting again
-- where it lies (where no claim looks) fails instead; `leasehold tasks requeue` moves it back.
CREATE TABLE tasks_done_kept PARTITION OF tasks FOR VALUES IN ('-infinity');
ALTER TABLE tasks_done_kept ADD CONSTRAINT tasks_done_kept_finished
    CHECK (status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead'));
CREATE TABLE tasks_done_default PARTITION OF tasks DEFAULT;
ALTER TABLE tasks_done_default ADD CONSTRAINT tasks_done_default_finished
    CHECK (status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead'));

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
LANGUAGE plpgsql SECURITY DEFINER AS $$
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
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (status IN (''succeeded'', ''partially_succeeded'', ''cancelled'', ''dead''))',
                   name, name || '_finished');
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
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS $$
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

-- Partitions for the days of the last month the existing finished rows finished on, and today
-- and the next three; tasks finished before that go to tasks_done_kept (retention deletes them
-- row by row) rather than make a table per day of a long history in one transaction.
SELECT leasehold_tasks_done_partition(d)
FROM (
    SELECT DISTINCT (coalesce(finished_at, updated_at) AT TIME ZONE 'UTC')::date AS d
    FROM tasks_unpartitioned
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
      AND coalesce(finished_at, updated_at) >= now() - interval '31 days'
    UNION
    SELECT ((now() AT TIME ZONE 'UTC')::date + n) FROM generate_series(0, 3) AS n
) days;

INSERT INTO tasks
SELECT o.*,
       CASE WHEN o.status NOT IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead')
            THEN 'infinity'::date
            WHEN coalesce(o.finished_at, o.updated_at) >= now() - interval '31 days'
            THEN (coalesce(o.finished_at, o.updated_at) AT TIME ZONE 'UTC')::date
            ELSE '-infinity'::date END
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

-- Waiting and running rows are only ever in tasks_live: their indexes are its own (the
-- statements that use them name done_on = 'infinity'), and the day partitions carry only the
-- indexes a finished row is found by.
CREATE INDEX tasks_claim_idx ON tasks_live (priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL;
CREATE INDEX tasks_claim_key_idx ON tasks_live (task_type, concurrency_key, priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_leased_type_idx ON tasks_live (task_type, concurrency_key)
    WHERE status IN ('running', 'cancel_requested');
CREATE INDEX tasks_deadline_idx ON tasks_live (deadline_at)
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
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    holder bigint;
BEGIN
    -- Under REPEATABLE READ or SERIALIZABLE this query would read the transaction's snapshot
    -- and miss a holder whose move committed while the insert waited on it: refuse instead.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'enqueue a task with an idempotency key in a READ COMMITTED transaction (this one is %)',
            current_setting('transaction_isolation')
            USING ERRCODE = 'feature_not_supported';
    END IF;
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

-- Attempts of type `task_type` started and ended since `since` (its breaker half-opened): the
-- claim's cap of a half-open type. A function, so the claim's own plan names tasks_live only
-- (reading every partition would lock each of them, and their indexes, on every claim) and
-- history is read only while a breaker is half open; plpgsql, so it is not inlined back.
CREATE FUNCTION leasehold_half_open_ended(task_type text, since timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM tasks r
            WHERE r.status IN ('succeeded', 'partially_succeeded')
              AND r.finished_at >= since AND r.started_at >= since
              AND r.task_type = leasehold_half_open_ended.task_type)
         + (SELECT count(*) FROM task_attempt_rows a JOIN tasks r ON r.id = a.task_id
            WHERE a.outcome = 'failed' AND a.finished_at >= since AND a.started_at >= since
              AND r.task_type = leasehold_half_open_ended.task_type)
         + (SELECT count(*) FROM tasks r
            WHERE r.final_outcome = 'failed' AND r.task_type = leasehold_half_open_ended.task_type
              AND r.finished_at >= since AND r.started_at >= since);
END
$$;

-- The SECURITY DEFINER functions find tables in the schema of tasks only (and temporary
-- objects last), whatever the caller's search_path.
DO $$
DECLARE
    schema text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE c.oid = 'tasks'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION leasehold_tasks_done_partition(date) SET search_path = %I, pg_temp', schema);
    EXECUTE format('ALTER FUNCTION leasehold_tasks_done_drop(date, text[], double precision) SET search_path = %I, pg_temp', schema);
    EXECUTE format('ALTER FUNCTION leasehold_idempotency_key_finished_holder() SET search_path = %I, pg_temp', schema);
END
$$;

-- The rights held before, on the new objects: on tasks also on the three partitions retention
-- deletes from row by row, and a role that could delete tasks may run retention's functions.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM leasehold_old_grants LOOP
        EXECUTE format('GRANT %s ON %s TO %s', g.privilege,
                       CASE g.rel WHEN 'tasks_id_seq' THEN 'SEQUENCE tasks_id_seq' ELSE g.rel END,
                       g.grantee);
        IF g.rel = 'tasks' AND g.privilege IN ('SELECT', 'UPDATE', 'DELETE') THEN
            EXECUTE format('GRANT %s ON tasks_live, tasks_done_kept, tasks_done_default TO %s',
                           g.privilege, g.grantee);
        END IF;
        IF g.rel = 'tasks' AND g.privilege = 'DELETE' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION leasehold_tasks_done_partition(date) TO %s', g.grantee);
            EXECUTE format('GRANT EXECUTE ON FUNCTION leasehold_tasks_done_drop(date, text[], double precision) TO %s', g.grantee);
        END IF;
    END LOOP;
END
$$;
DROP TABLE leasehold_old_grants;

ANALYZE tasks;
