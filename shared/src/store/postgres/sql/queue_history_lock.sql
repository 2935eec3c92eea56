-- Serialises sampler passes (two agents that both believe they lead): the second reads what
-- the first wrote. Held until the transaction ends. No parameters.
SELECT pg_advisory_xact_lock(hashtext('leasehold.queue_history'))
