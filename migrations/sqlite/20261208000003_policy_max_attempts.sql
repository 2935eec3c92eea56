-- Per-type max attempts (issue 24): see the PostgreSQL migration of the same name.
ALTER TABLE policies ADD COLUMN max_attempts INTEGER NULL
    CONSTRAINT policies_max_attempts_range CHECK (max_attempts IS NULL OR max_attempts BETWEEN 1 AND 1000);
