-- Serialise claims of limited scopes: for each scope with a concurrency limit that this claim
-- touches (global '*' and each requested type), try a transaction-level advisory lock.
-- A scope whose lock another claimer holds is skipped this round (capacity 0), so claimers
-- never wait on each other and never deadlock. Unlimited scopes take no lock. $1 types.
SELECT scope, pg_try_advisory_xact_lock(19528, hashtext(scope)) AS locked
FROM (
    SELECT scope FROM policies
    WHERE max_concurrency IS NOT NULL AND (scope = '*' OR scope = ANY($1::text[]))
    ORDER BY scope
) limited
