-- Leasehold schema, SQLite (DESIGN §3 and §11): the same tables, columns and rules as the
-- PostgreSQL schema, in SQLite's terms.
--
-- * Times are INTEGER microseconds since the Unix epoch, UTC. Lease times are always taken from
--   SQLite's own clock (julianday('now'), millisecond precision) inside the transaction that
--   writes them, never from the agent's clock.
-- * JSON values (payload, progress, result, last_error, params) are TEXT holding valid JSON;
--   agents.task_types is a JSON array of type names.
-- * There is no NOTIFY: agents poll (DESIGN §11).
-- * Writers serialise on SQLite's single write lock (every store transaction that writes
--   begins with BEGIN IMMEDIATE), so claims need no row locks to honour concurrency limits.
--
-- A plain `INSERT INTO tasks (task_type, payload) VALUES (...)` is a complete enqueue: every
-- other column has a default.

CREATE TABLE tasks (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_type       TEXT    NOT NULL
        CONSTRAINT tasks_type_format CHECK (length(task_type) BETWEEN 1 AND 64
            AND substr(task_type, 1, 1) GLOB '[a-z0-9]'
            AND task_type NOT GLOB '*[^a-z0-9_.:-]*'),
    payload         TEXT    NOT NULL DEFAULT '{}'
        CONSTRAINT tasks_payload_json CHECK (json_valid(payload))
        CONSTRAINT tasks_payload_size CHECK (length(CAST(payload AS BLOB)) <= 1048576),
    priority        INTEGER NOT NULL DEFAULT 0
        CONSTRAINT tasks_priority_range CHECK (priority BETWEEN -32768 AND 32767),
    status          TEXT    NOT NULL DEFAULT 'queued'
        CONSTRAINT tasks_status_known CHECK (status IN ('queued', 'running', 'retry_wait',
            'cancel_requested', 'succeeded', 'partially_succeeded', 'cancelled', 'dead')),
    available_at    INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    deadline_at     INTEGER,
    timeout_ms      INTEGER
        CONSTRAINT tasks_timeout_range CHECK (timeout_ms IS NULL OR timeout_ms BETWEEN 1 AND 604800000),
    attempt         INTEGER NOT NULL DEFAULT 0
        CONSTRAINT tasks_attempt_range CHECK (attempt >= 0),
    max_attempts    INTEGER NOT NULL DEFAULT 25
        CONSTRAINT tasks_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_owner     TEXT
        CONSTRAINT tasks_lease_owner_size CHECK (lease_owner IS NULL OR length(CAST(lease_owner AS BLOB)) BETWEEN 1 AND 200),
    lease_epoch     INTEGER NOT NULL DEFAULT 0
        CONSTRAINT tasks_lease_epoch_range CHECK (lease_epoch >= 0),
    lease_until     INTEGER,
    heartbeat_at    INTEGER,
    idempotency_key TEXT
        CONSTRAINT tasks_idempotency_key_size CHECK (idempotency_key IS NULL OR length(CAST(idempotency_key AS BLOB)) BETWEEN 1 AND 255),
    progress        TEXT
        CONSTRAINT tasks_progress_size CHECK (progress IS NULL OR (json_valid(progress) AND length(CAST(progress AS BLOB)) <= 4096)),
    result          TEXT
        CONSTRAINT tasks_result_size CHECK (result IS NULL OR (json_valid(result) AND length(CAST(result AS BLOB)) <= 1048576)),
    last_error      TEXT
        CONSTRAINT tasks_last_error_size CHECK (last_error IS NULL OR (json_valid(last_error) AND length(CAST(last_error AS BLOB)) <= 65536)),
    created_at      INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    started_at      INTEGER,
    finished_at     INTEGER,
    updated_at      INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    CONSTRAINT tasks_leased_has_lease CHECK (status NOT IN ('running', 'cancel_requested')
        OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL AND heartbeat_at IS NOT NULL)),
    CONSTRAINT tasks_deadline_after_creation CHECK (deadline_at IS NULL OR deadline_at >= created_at - 86400000000)
);

-- Claim: due rows in claim order; only claimable rows are in it.
CREATE INDEX tasks_claim_idx ON tasks (priority DESC, available_at, id)
    WHERE status IN ('queued', 'retry_wait');
-- Leased rows: running counts (limits), recovery, suspect leases.
CREATE INDEX tasks_leased_type_idx ON tasks (task_type) WHERE status IN ('running', 'cancel_requested');
CREATE INDEX tasks_leased_until_idx ON tasks (lease_until) WHERE status IN ('running', 'cancel_requested');
-- The dead-letter queue, keyset-paged by id.
CREATE INDEX tasks_dead_idx ON tasks (id) WHERE status = 'dead';
-- Deadline expiry of waiting rows.
CREATE INDEX tasks_deadline_idx ON tasks (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'retry_wait');
-- Retention of finished rows.
CREATE INDEX tasks_finished_idx ON tasks (finished_at)
    WHERE status IN ('succeeded', 'partially_succeeded', 'cancelled', 'dead');
CREATE UNIQUE INDEX tasks_idempotency_key_idx ON tasks (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- One row per ended attempt, keyed by its fencing epoch: at most one outcome per holding.
CREATE TABLE task_attempts (
    task_id     INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    agent       TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    outcome     TEXT    NOT NULL
        CONSTRAINT task_attempts_outcome_known CHECK (outcome IN ('succeeded', 'partially_succeeded',
            'failed', 'cancelled', 'released', 'lease_expired')),
    error       TEXT
        CONSTRAINT task_attempts_error_size CHECK (error IS NULL OR (json_valid(error) AND length(CAST(error AS BLOB)) <= 65536)),
    PRIMARY KEY (task_id, epoch)
) WITHOUT ROWID;

-- Deleting tasks deletes their attempts.
CREATE TRIGGER tasks_delete_attempts AFTER DELETE ON tasks
BEGIN
    DELETE FROM task_attempts WHERE task_id = OLD.id;
END;

-- Limits and policies: scope '*' is global (always present), any other scope is a task type
-- whose null columns inherit the global row.
CREATE TABLE policies (
    scope            TEXT    PRIMARY KEY
        CONSTRAINT policies_scope_format CHECK (scope = '*' OR (length(scope) BETWEEN 1 AND 64
            AND substr(scope, 1, 1) GLOB '[a-z0-9]' AND scope NOT GLOB '*[^a-z0-9_.:-]*')),
    max_concurrency  INTEGER
        CONSTRAINT policies_concurrency_range CHECK (max_concurrency IS NULL OR max_concurrency BETWEEN 0 AND 1000000),
    paused           INTEGER NOT NULL DEFAULT 0
        CONSTRAINT policies_paused_bool CHECK (paused IN (0, 1)),
    retry_base_ms    INTEGER
        CONSTRAINT policies_retry_base_range CHECK (retry_base_ms IS NULL OR retry_base_ms BETWEEN 0 AND 604800000),
    retry_multiplier REAL
        CONSTRAINT policies_retry_multiplier_range CHECK (retry_multiplier IS NULL OR retry_multiplier BETWEEN 1 AND 100),
    retry_max_ms     INTEGER
        CONSTRAINT policies_retry_max_range CHECK (retry_max_ms IS NULL OR retry_max_ms BETWEEN 0 AND 604800000),
    retry_jitter     REAL
        CONSTRAINT policies_retry_jitter_range CHECK (retry_jitter IS NULL OR retry_jitter BETWEEN 0 AND 1),
    timeout_ms       INTEGER
        CONSTRAINT policies_timeout_range CHECK (timeout_ms IS NULL OR timeout_ms BETWEEN 1 AND 604800000),
    slow_ms          INTEGER
        CONSTRAINT policies_slow_range CHECK (slow_ms IS NULL OR slow_ms BETWEEN 1 AND 604800000),
    updated_at       INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    CONSTRAINT policies_global_complete CHECK (scope <> '*' OR (retry_base_ms IS NOT NULL
        AND retry_multiplier IS NOT NULL AND retry_max_ms IS NOT NULL AND retry_jitter IS NOT NULL
        AND timeout_ms IS NOT NULL AND slow_ms IS NOT NULL))
);
-- Defaults mirror leasehold_shared::domain::policy::GLOBAL_DEFAULTS (a test checks they agree).
INSERT INTO policies (scope, retry_base_ms, retry_multiplier, retry_max_ms, retry_jitter, timeout_ms, slow_ms)
VALUES ('*', 30000, 2.0, 600000, 0.2, 1800000, 60000);

-- Agent registry. An agent's id is its name plus a per-start suffix from agent_start_seq.
CREATE TABLE agent_start_seq (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT INTO agent_start_seq (name, value) VALUES ('agents', 0);
CREATE TABLE agents (
    id                TEXT    PRIMARY KEY
        CONSTRAINT agents_id_size CHECK (length(CAST(id AS BLOB)) BETWEEN 1 AND 200),
    name              TEXT    NOT NULL,
    host              TEXT    NOT NULL,
    pid               INTEGER NOT NULL,
    grpc_address      TEXT,
    version           TEXT    NOT NULL,
    task_types        TEXT    NOT NULL DEFAULT '[]'
        CONSTRAINT agents_task_types_json CHECK (json_valid(task_types) AND json_type(task_types) = 'array'),
    local_concurrency INTEGER NOT NULL
        CONSTRAINT agents_local_concurrency_range CHECK (local_concurrency BETWEEN 0 AND 100000),
    active            INTEGER NOT NULL DEFAULT 0
        CONSTRAINT agents_active_range CHECK (active >= 0),
    state             TEXT    NOT NULL DEFAULT 'running'
        CONSTRAINT agents_state_known CHECK (state IN ('running', 'draining', 'stopped')),
    started_at        INTEGER NOT NULL,
    heartbeat_at      INTEGER NOT NULL,
    stopped_at        INTEGER
);

-- The leader: one row, leased like a task, fenced by term.
CREATE TABLE leader (
    name         TEXT    PRIMARY KEY DEFAULT 'default'
        CONSTRAINT leader_one_row CHECK (name = 'default'),
    owner        TEXT,
    term         INTEGER NOT NULL DEFAULT 0,
    lease_until  INTEGER,
    heartbeat_at INTEGER,
    elected_at   INTEGER
);
INSERT INTO leader (name) VALUES ('default');

-- Cron schedules, fired by the leader.
CREATE TABLE schedules (
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
    max_attempts  INTEGER NOT NULL DEFAULT 25
        CONSTRAINT schedules_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    enabled       INTEGER NOT NULL DEFAULT 1,
    last_fired_at INTEGER,
    next_fire_at  INTEGER,
    created_at    INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    updated_at    INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
);

-- Who did what to what, when, with what result: written in the same transaction as the change.
CREATE TABLE audit_log (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    actor   TEXT    NOT NULL
        CONSTRAINT audit_log_actor_size CHECK (length(CAST(actor AS BLOB)) BETWEEN 1 AND 200),
    role    TEXT    NOT NULL
        CONSTRAINT audit_log_role_known CHECK (role IN ('viewer', 'operator', 'system')),
    action  TEXT    NOT NULL,
    target  TEXT    NOT NULL DEFAULT '',
    params  TEXT
        CONSTRAINT audit_log_params_size CHECK (params IS NULL OR (json_valid(params) AND length(CAST(params AS BLOB)) <= 65536)),
    result  TEXT    NOT NULL
        CONSTRAINT audit_log_result_known CHECK (result IN ('applied', 'noop', 'denied', 'failed')),
    detail  TEXT
);
CREATE INDEX audit_log_at_idx ON audit_log (at);
