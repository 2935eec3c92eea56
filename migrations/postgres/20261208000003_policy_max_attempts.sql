-- Per-type max attempts (issue 24).
--
-- A task enqueued without its own `max_attempts` takes its type's policy value, else the global
-- row's, else 25, resolved once at enqueue (changing the policy later does not touch tasks
-- already enqueued). A plain `INSERT INTO tasks` that names no `max_attempts` still gets the
-- column default (25), not the policy.
--
-- Upgrading: instant (a nullable column without default; its CHECK holds for every NULL).
ALTER TABLE policies
    ADD COLUMN max_attempts integer,
    ADD CONSTRAINT policies_max_attempts_range
        CHECK (max_attempts IS NULL OR max_attempts BETWEEN 1 AND 1000);
