-- A claim at ?2 (µs) started ?3 tasks counted by rate-limited scope ?1.
INSERT INTO rate_limit_starts (scope, at, n) VALUES (?1, ?2, ?3)
