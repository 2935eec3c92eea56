-- Planner settings for the rest of this transaction: index nested loops only.
-- Batch statements (completions, renewals, releases, recovery) join a few hundred ids against
-- tasks. With fresh statistics the planner would rather hash-join them against a sequential or
-- bitmap scan of the whole table, or of a partial index full of dead entries; measured: batch
-- completions 50x slower right after an ANALYZE. Statements are planned once per connection
-- (generic plans), always inside such a transaction, so the cached plan is the indexed one.
SELECT set_config('enable_hashjoin', 'off', true) = 'off'
   AND set_config('enable_mergejoin', 'off', true) = 'off'
   AND set_config('enable_bitmapscan', 'off', true) = 'off'
   AND set_config('enable_seqscan', 'off', true) = 'off'
   AND set_config('jit', 'off', true) = 'off' AS ok
