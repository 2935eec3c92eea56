-- Circuit breakers (issue 23): see the PostgreSQL migration of the same name.
ALTER TABLE policies ADD COLUMN breaker_failures INTEGER NULL
    CONSTRAINT policies_breaker_failures_range
        CHECK (breaker_failures IS NULL OR breaker_failures BETWEEN 1 AND 1000000)
    CONSTRAINT policies_breaker_types_only CHECK (scope <> '*' OR breaker_failures IS NULL);
ALTER TABLE policies ADD COLUMN breaker_within_ms INTEGER NULL
    CONSTRAINT policies_breaker_within_range
        CHECK (breaker_within_ms IS NULL OR breaker_within_ms BETWEEN 1 AND 86400000)
    CONSTRAINT policies_breaker_within_complete
        CHECK ((breaker_failures IS NULL) = (breaker_within_ms IS NULL));
ALTER TABLE policies ADD COLUMN breaker_cooldown_ms INTEGER NULL
    CONSTRAINT policies_breaker_cooldown_range
        CHECK (breaker_cooldown_ms IS NULL OR breaker_cooldown_ms BETWEEN 1 AND 604800000)
    CONSTRAINT policies_breaker_cooldown_complete
        CHECK ((breaker_failures IS NULL) = (breaker_cooldown_ms IS NULL));
ALTER TABLE policies ADD COLUMN breaker_state TEXT NOT NULL DEFAULT 'closed'
    CONSTRAINT policies_breaker_state_known CHECK (breaker_state IN ('closed', 'open', 'half_open'));
ALTER TABLE policies ADD COLUMN breaker_since INTEGER NULL;
ALTER TABLE policies ADD COLUMN breaker_until INTEGER NULL;

CREATE INDEX task_attempts_failed_idx ON task_attempts (finished_at) WHERE outcome = 'failed';
