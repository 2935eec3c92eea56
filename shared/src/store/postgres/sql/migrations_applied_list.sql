-- The migrations sqlx recorded as applied, by version, with their checksums: what `migrate`
-- behind a transaction pooler compares with the build's own. No parameters.
SELECT version, checksum FROM _sqlx_migrations WHERE success ORDER BY version
