-- The rate-limit ledger after a claim that started tasks at $2 (the claim statement's time, its
-- tasks' started_at): one row per rate-limited scope $1[i] that started $3[i] > 0 of them, and
-- those scopes' rows that have left their windows go. Runs in the claim's transaction, under
-- the advisory locks of the scopes $1, so the next claim of a scope sees these starts.
WITH stamped AS (
    INSERT INTO rate_limit_starts (scope, at, n)
    SELECT s.scope, $2, s.n FROM unnest($1::text[], $3::int[]) AS s(scope, n)
    WHERE s.n > 0
)
DELETE FROM rate_limit_starts o
USING policies p
WHERE p.scope = ANY($1::text[]) AND o.scope = p.scope AND p.rate_starts IS NOT NULL
  AND o.at <= $2 - make_interval(secs => p.rate_period_ms / 1000.0)
