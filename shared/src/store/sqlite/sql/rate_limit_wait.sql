-- After a claim that came back short: of the rate-limited scopes ?2 (JSON array), those whose
-- window ending at now ?1 (µs) is full, and how long until enough of their oldest starts leave
-- it for one more start to be allowed (µs): the oldest start at which the running total
-- (oldest first) reaches used - limit + 1, plus the period. The earliest over those scopes;
-- null when none of them is full.
WITH win AS (
    SELECT r.at, p.rate_starts, p.rate_period_ms,
           sum(r.n) OVER (PARTITION BY r.scope ORDER BY r.at ROWS UNBOUNDED PRECEDING) AS cum,
           sum(r.n) OVER (PARTITION BY r.scope) AS used
    FROM rate_limit_starts r JOIN policies p ON p.scope = r.scope
    WHERE r.scope IN (SELECT value FROM json_each(?2)) AND p.rate_starts IS NOT NULL
      AND r.at > ?1 - p.rate_period_ms * 1000
)
SELECT min(w.at + w.rate_period_ms * 1000 - ?1) AS wait_us
FROM win w
WHERE w.used >= w.rate_starts AND w.cum >= w.used - w.rate_starts + 1
