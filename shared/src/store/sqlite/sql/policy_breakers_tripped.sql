-- The task types whose circuit breaker is open or half-open, and which. No parameters.
SELECT scope, breaker_state FROM policies WHERE breaker_state <> 'closed'
