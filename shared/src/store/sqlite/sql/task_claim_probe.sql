-- Now, and whether any task of types ?1 (JSON array) is due: a read before a claim queues for
-- the write lock, so a claimer with nothing to take does not.
SELECT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000) AS now,
       -- Keyless tasks through tasks_claim_idx, keyed ones through tasks_claim_key_idx.
       EXISTS (SELECT 1 FROM tasks
               WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NULL
                 AND available_at <= (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
                 AND task_type IN (SELECT value FROM json_each(?1)))
       OR EXISTS (SELECT 1 FROM tasks
               WHERE status IN ('queued', 'retry_wait') AND concurrency_key IS NOT NULL
                 AND available_at <= (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
                 AND task_type IN (SELECT value FROM json_each(?1))) AS due
