-- Rate-limit ledger rows of scope ?1 at or before ?2 (µs: now minus the scope's period): they
-- no longer count against any window a claim checks.
DELETE FROM rate_limit_starts WHERE scope = ?1 AND at <= ?2
