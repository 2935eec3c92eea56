-- Every policy row, the global one ('*') first, then by scope. No parameters.
SELECT scope, max_concurrency, paused, retry_base_ms, retry_multiplier, retry_max_ms,
       retry_jitter, timeout_ms, slow_ms, rate_starts, rate_period_ms, shed_after_ms,
       per_key_concurrency, breaker_failures, breaker_within_ms, breaker_cooldown_ms,
       breaker_state, breaker_since, breaker_until, max_snoozes,
       max_attempts
FROM policies
ORDER BY scope = '*' DESC, scope
