-- Write a whole policy row: ?1 scope, ?2 max concurrency, ?3 paused, ?4 retry base ms,
-- ?5 retry multiplier, ?6 retry max ms, ?7 retry jitter, ?8 timeout ms, ?9 slow ms, ?10 rate
-- limit starts, ?11 rate limit period ms (both null: no rate limit), ?12 shed after ms,
-- ?13 per-key concurrency, ?14 ?15 ?16 breaker failures, window ms, cooldown ms (all null: no
-- breaker), ?17 max snoozes, ?18 max attempts, ?19 now. The breaker's state is the leader's: a breaker set anew starts closed,
-- counting failures from now; a cleared one is closed.
INSERT INTO policies (scope, max_concurrency, paused, retry_base_ms, retry_multiplier,
                      retry_max_ms, retry_jitter, timeout_ms, slow_ms, rate_starts, rate_period_ms,
                      shed_after_ms, per_key_concurrency, breaker_failures, breaker_within_ms,
                      breaker_cooldown_ms, breaker_since, max_snoozes, max_attempts, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
        CASE WHEN ?14 IS NOT NULL THEN ?19 END, ?17, ?18, ?19)
ON CONFLICT (scope) DO UPDATE SET max_concurrency = excluded.max_concurrency,
    paused = excluded.paused, retry_base_ms = excluded.retry_base_ms,
    retry_multiplier = excluded.retry_multiplier, retry_max_ms = excluded.retry_max_ms,
    retry_jitter = excluded.retry_jitter, timeout_ms = excluded.timeout_ms,
    slow_ms = excluded.slow_ms, rate_starts = excluded.rate_starts,
    rate_period_ms = excluded.rate_period_ms, shed_after_ms = excluded.shed_after_ms,
    per_key_concurrency = excluded.per_key_concurrency,
    breaker_state = CASE WHEN excluded.breaker_failures IS NULL OR policies.breaker_failures IS NULL
                         THEN 'closed' ELSE policies.breaker_state END,
    breaker_since = CASE WHEN excluded.breaker_failures IS NULL THEN NULL
                         WHEN policies.breaker_failures IS NULL THEN excluded.updated_at
                         ELSE policies.breaker_since END,
    breaker_until = CASE WHEN excluded.breaker_failures IS NULL OR policies.breaker_failures IS NULL
                         THEN NULL ELSE policies.breaker_until END,
    breaker_failures = excluded.breaker_failures,
    breaker_within_ms = excluded.breaker_within_ms,
    breaker_cooldown_ms = excluded.breaker_cooldown_ms,
    max_snoozes = excluded.max_snoozes,
    max_attempts = excluded.max_attempts,
    updated_at = excluded.updated_at
RETURNING scope, max_concurrency, paused, retry_base_ms, retry_multiplier,
          retry_max_ms, retry_jitter, timeout_ms, slow_ms, rate_starts, rate_period_ms, shed_after_ms,
          per_key_concurrency, breaker_failures, breaker_within_ms, breaker_cooldown_ms,
          breaker_state, breaker_since, breaker_until, max_snoozes, max_attempts
