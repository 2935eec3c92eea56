-- Moves the breaker of type ?1 to state ?2 at now ?3; an open one half-opens at ?4 (µs).
UPDATE policies SET breaker_state = ?2, breaker_since = ?3, breaker_until = ?4
WHERE scope = ?1
