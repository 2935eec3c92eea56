-- The starts the rate-limit ledgers of scopes ?2 (JSON array) hold within their windows ending
-- at now ?1 (µs). A scope without ledger rows there is left out (it used none).
SELECT r.scope, sum(r.n) AS used
FROM rate_limit_starts r JOIN policies p ON p.scope = r.scope
WHERE r.scope IN (SELECT value FROM json_each(?2)) AND p.rate_starts IS NOT NULL
  AND r.at > ?1 - p.rate_period_ms * 1000
GROUP BY r.scope
