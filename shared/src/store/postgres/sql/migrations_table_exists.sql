-- Whether sqlx's bookkeeping table _sqlx_migrations exists (absent until the first migration).
SELECT to_regclass('_sqlx_migrations') IS NOT NULL AS present
