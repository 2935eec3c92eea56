-- The task types with a circuit breaker, their breaker and its state. No parameters.
SELECT scope, breaker_failures, breaker_within_ms, breaker_cooldown_ms, breaker_state,
       breaker_since, breaker_until
FROM policies
WHERE breaker_failures IS NOT NULL AND scope <> '*'
ORDER BY scope
