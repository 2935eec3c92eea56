-- Circuit breakers (issue 23). A task type's policy may set a breaker: after `breaker_failures`
-- failed attempts within `breaker_within_ms`, the leader opens it (the type is not claimed) for
-- `breaker_cooldown_ms`, then half-opens it (one task at a time tries): a success closes it, a
-- failure opens it again. The state lives beside the configuration; policy writes leave it to
-- the leader (clearing the breaker closes it).
ALTER TABLE policies
    ADD COLUMN breaker_failures integer,
    ADD COLUMN breaker_within_ms bigint,
    ADD COLUMN breaker_cooldown_ms bigint,
    ADD COLUMN breaker_state text NOT NULL DEFAULT 'closed',
    -- When the state last changed (a closed breaker counts failures after it).
    ADD COLUMN breaker_since timestamptz,
    -- An open breaker half-opens at this time.
    ADD COLUMN breaker_until timestamptz,
    ADD CONSTRAINT policies_breaker_failures_range
        CHECK (breaker_failures IS NULL OR breaker_failures BETWEEN 1 AND 1000000),
    ADD CONSTRAINT policies_breaker_within_range
        CHECK (breaker_within_ms IS NULL OR breaker_within_ms BETWEEN 1 AND 86400000),
    ADD CONSTRAINT policies_breaker_cooldown_range
        CHECK (breaker_cooldown_ms IS NULL OR breaker_cooldown_ms BETWEEN 1 AND 604800000),
    ADD CONSTRAINT policies_breaker_complete CHECK (
        (breaker_failures IS NULL) = (breaker_within_ms IS NULL)
        AND (breaker_failures IS NULL) = (breaker_cooldown_ms IS NULL)),
    ADD CONSTRAINT policies_breaker_state_known
        CHECK (breaker_state IN ('closed', 'open', 'half_open')),
    ADD CONSTRAINT policies_breaker_types_only CHECK (scope <> '*' OR breaker_failures IS NULL);

-- Failed attempts by the time they ended, for the breakers' failure counts: only failures get
-- an entry (retried ones as attempt rows, final ones in the task row), so successes pay nothing.
CREATE INDEX task_attempt_rows_failed_idx ON task_attempt_rows (finished_at) WHERE outcome = 'failed';
CREATE INDEX tasks_failed_idx ON tasks (task_type, finished_at) WHERE final_outcome = 'failed';
