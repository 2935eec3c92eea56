-- How many migrations sqlx recorded as applied. No parameters.
SELECT count(*) AS applied FROM _sqlx_migrations WHERE success
