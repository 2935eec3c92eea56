-- Rate limits (issue 23): at most `rate_starts` task starts in any window of
-- `rate_period_ms`, per type and globally, exact across agents.
--
-- A claim that starts tasks of a rate-limited scope writes one ledger row (scope, its statement
-- time, how many it started) under the scope's advisory lock, after counting the scope's rows
-- within the last period; rows older than the period are deleted by the next claim of the scope.
-- Checking the window that ends at each claim is enough: a window's count only grows at a
-- claim, so the fullest window of any length-P stretch ends at one. A policy row has both
-- columns or neither. Unlimited scopes never touch the ledger.
--
-- Upgrading: instant (two nullable columns, a new table); agents of the previous version ignore
-- rate limits, so set none until every agent runs this version.

ALTER TABLE policies
    ADD COLUMN rate_starts integer,
    ADD COLUMN rate_period_ms bigint,
    ADD CONSTRAINT policies_rate_starts_range
        CHECK (rate_starts IS NULL OR rate_starts BETWEEN 1 AND 1000000),
    ADD CONSTRAINT policies_rate_period_range
        CHECK (rate_period_ms IS NULL OR rate_period_ms BETWEEN 1 AND 86400000),
    ADD CONSTRAINT policies_rate_complete CHECK ((rate_starts IS NULL) = (rate_period_ms IS NULL));

CREATE TABLE rate_limit_starts (
    scope text        NOT NULL,
    at    timestamptz NOT NULL,
    n     integer     NOT NULL CONSTRAINT rate_limit_starts_n_positive CHECK (n >= 1)
);
CREATE INDEX rate_limit_starts_scope_at ON rate_limit_starts (scope, at);
