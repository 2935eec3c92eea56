-- Write a whole policy row.
INSERT INTO policies AS p (scope, max_concurrency, paused, retry_base_ms, retry_multiplier, retry_max_ms,
                           retry_jitter, timeout_ms, slow_ms, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
ON CONFLICT (scope) DO UPDATE
SET max_concurrency = EXCLUDED.max_concurrency,
    paused = EXCLUDED.paused,
    retry_base_ms = EXCLUDED.retry_base_ms,
    retry_multiplier = EXCLUDED.retry_multiplier,
    retry_max_ms = EXCLUDED.retry_max_ms,
    retry_jitter = EXCLUDED.retry_jitter,
    timeout_ms = EXCLUDED.timeout_ms,
    slow_ms = EXCLUDED.slow_ms,
    updated_at = now()
RETURNING scope, max_concurrency, paused, retry_base_ms, retry_multiplier, retry_max_ms, retry_jitter,
          timeout_ms, slow_ms
