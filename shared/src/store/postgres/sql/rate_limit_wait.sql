-- After a claim that came back short: of the rate-limited scopes $1 (locked by this claim's
-- transaction), those whose window is full now, and how long until the oldest start in the
-- window leaves it (ms, at least 1) — the earliest a start can be allowed again. Null when none
-- of them is full.
SELECT min(w.free_in_ms)::bigint AS wait_ms
FROM (
    SELECT greatest(ceil(extract(epoch FROM min(r.at) + make_interval(secs => p.rate_period_ms / 1000.0)
                                 - statement_timestamp()) * 1000), 1) AS free_in_ms,
           sum(r.n) AS used, p.rate_starts
    FROM policies p
    JOIN rate_limit_starts r
      ON r.scope = p.scope
     AND r.at > statement_timestamp() - make_interval(secs => p.rate_period_ms / 1000.0)
    WHERE p.scope = ANY($1::text[]) AND p.rate_starts IS NOT NULL
    GROUP BY p.scope, p.rate_period_ms, p.rate_starts
) w
WHERE w.used >= w.rate_starts
