-- Rate limits (issue 23): at most `rate_starts` task starts in any window of
-- `rate_period_ms`, per type and globally. A claim (under the write lock) counts the scope's
-- ledger rows within the last period, starts at most what is left, writes one row (scope, its
-- time in µs, how many it started) and deletes the scope's rows older than the period. A policy
-- row has both columns or neither.
ALTER TABLE policies ADD COLUMN rate_starts INTEGER NULL
    CONSTRAINT policies_rate_starts_range CHECK (rate_starts IS NULL OR rate_starts BETWEEN 1 AND 1000000);
ALTER TABLE policies ADD COLUMN rate_period_ms INTEGER NULL
    CONSTRAINT policies_rate_period_range CHECK (rate_period_ms IS NULL OR rate_period_ms BETWEEN 1 AND 86400000)
    CONSTRAINT policies_rate_complete CHECK ((rate_starts IS NULL) = (rate_period_ms IS NULL));

CREATE TABLE rate_limit_starts (
    scope TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    n     INTEGER NOT NULL CONSTRAINT rate_limit_starts_n_positive CHECK (n >= 1)
);
CREATE INDEX rate_limit_starts_scope_at ON rate_limit_starts (scope, at);
