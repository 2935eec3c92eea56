-- Load shedding (issue 23): a task type's policy may set `shed_after_ms`; the leader cancels
-- (reason `shed`) the type's waiting tasks that became due longer ago than that, instead of
-- running them late. Only task types shed (the global row may not set it). Instant: one
-- nullable column.
ALTER TABLE policies
    ADD COLUMN shed_after_ms bigint,
    ADD CONSTRAINT policies_shed_after_range
        CHECK (shed_after_ms IS NULL OR shed_after_ms BETWEEN 1 AND 604800000),
    ADD CONSTRAINT policies_shed_types_only CHECK (scope <> '*' OR shed_after_ms IS NULL);
