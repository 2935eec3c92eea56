-- Every rate-limited scope: its limit, and the starts its ledger holds within the window that
-- ends at now ?1 (µs), with the oldest of them (null when none).
SELECT p.scope, p.rate_starts, p.rate_period_ms, coalesce(sum(r.n), 0) AS used, min(r.at) AS oldest
FROM policies p
LEFT JOIN rate_limit_starts r ON r.scope = p.scope AND r.at > ?1 - p.rate_period_ms * 1000
WHERE p.rate_starts IS NOT NULL
GROUP BY p.scope, p.rate_starts, p.rate_period_ms
