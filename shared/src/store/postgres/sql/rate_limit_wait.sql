-- After a claim that came back short: of the rate-limited scopes $1 (locked by this claim's
-- transaction), those whose window is full now, and how long until enough of their oldest
-- starts leave it for one more start to be allowed (ms, at least 1): the oldest start at which
-- the running total (oldest first) reaches used - limit + 1, plus the period. The earliest over
-- those scopes; null when none of them is full.
WITH win AS (
    SELECT r.at, p.rate_starts, p.rate_period_ms,
           sum(r.n) OVER (PARTITION BY r.scope ORDER BY r.at ROWS UNBOUNDED PRECEDING) AS cum,
           sum(r.n) OVER (PARTITION BY r.scope) AS used
    FROM policies p
    JOIN rate_limit_starts r
      ON r.scope = p.scope
     AND r.at > statement_timestamp() - make_interval(secs => p.rate_period_ms / 1000.0)
    WHERE p.scope = ANY($1::text[]) AND p.rate_starts IS NOT NULL
)
SELECT min(greatest(ceil(extract(epoch FROM w.at + make_interval(secs => w.rate_period_ms / 1000.0)
                                 - statement_timestamp()) * 1000), 1))::bigint AS wait_ms
FROM win w
WHERE w.used >= w.rate_starts AND w.cum >= w.used - w.rate_starts + 1
