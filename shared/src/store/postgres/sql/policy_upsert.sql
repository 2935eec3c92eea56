-- Write a whole policy row: $1 scope, $2 max concurrency, $3 paused, $4 retry base ms,
-- $5 retry multiplier, $6 retry max ms, $7 retry jitter, $8 timeout ms, $9 slow ms, $10 rate
-- limit starts, $11 rate limit period ms (both null: no rate limit), $12 shed after ms, $13 per-key
-- concurrency, $14 $15 $16 breaker failures, window ms, cooldown ms (all null: no breaker),
-- $17 max snoozes, $18 max attempts.
-- The breaker's state is the leader's: a breaker set anew starts closed, counting failures
-- from now; a cleared one is closed.
INSERT INTO policies AS p (scope, max_concurrency, paused, retry_base_ms, retry_multiplier, retry_max_ms,
                           retry_jitter, timeout_ms, slow_ms, rate_starts, rate_period_ms, shed_after_ms,
                           per_key_concurrency, breaker_failures, breaker_within_ms,
                           breaker_cooldown_ms, breaker_since, max_snoozes, max_attempts,
                           updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
        CASE WHEN $14::integer IS NOT NULL THEN now() END, $17, $18, now())
ON CONFLICT (scope) DO UPDATE
SET max_concurrency = EXCLUDED.max_concurrency,
    paused = EXCLUDED.paused,
    retry_base_ms = EXCLUDED.retry_base_ms,
    retry_multiplier = EXCLUDED.retry_multiplier,
    retry_max_ms = EXCLUDED.retry_max_ms,
    retry_jitter = EXCLUDED.retry_jitter,
    timeout_ms = EXCLUDED.timeout_ms,
    slow_ms = EXCLUDED.slow_ms,
    rate_starts = EXCLUDED.rate_starts,
    rate_period_ms = EXCLUDED.rate_period_ms,
    shed_after_ms = EXCLUDED.shed_after_ms,
    per_key_concurrency = EXCLUDED.per_key_concurrency,
    breaker_state = CASE WHEN EXCLUDED.breaker_failures IS NULL OR p.breaker_failures IS NULL
                         THEN 'closed' ELSE p.breaker_state END,
    breaker_since = CASE WHEN EXCLUDED.breaker_failures IS NULL THEN NULL
                         WHEN p.breaker_failures IS NULL THEN now() ELSE p.breaker_since END,
    breaker_until = CASE WHEN EXCLUDED.breaker_failures IS NULL OR p.breaker_failures IS NULL
                         THEN NULL ELSE p.breaker_until END,
    breaker_failures = EXCLUDED.breaker_failures,
    breaker_within_ms = EXCLUDED.breaker_within_ms,
    breaker_cooldown_ms = EXCLUDED.breaker_cooldown_ms,
    max_snoozes = EXCLUDED.max_snoozes,
    max_attempts = EXCLUDED.max_attempts,
    updated_at = now()
RETURNING scope, max_concurrency, paused, retry_base_ms, retry_multiplier, retry_max_ms, retry_jitter,
          timeout_ms, slow_ms, rate_starts, rate_period_ms, shed_after_ms,
          per_key_concurrency, breaker_failures, breaker_within_ms, breaker_cooldown_ms,
          breaker_state, breaker_since, breaker_until, max_snoozes, max_attempts
