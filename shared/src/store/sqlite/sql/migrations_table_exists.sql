-- Whether sqlx's bookkeeping table _sqlx_migrations exists (absent until the first migration).
SELECT count(*) > 0 AS present
FROM sqlite_master
WHERE type = 'table' AND name = '_sqlx_migrations'
