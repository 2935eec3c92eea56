-- The keys of type ?1 with a waiting task (queued, retry_wait) due at now ?5, after key ?2 and
-- at most key ?3 (null: no upper bound), in key order, at most ?4 of them: one step of a
-- claim's round of concurrency keys (store/key_cursors.rs). Walks tasks_claim_key_idx.
SELECT DISTINCT concurrency_key FROM tasks
WHERE task_type = ?1 AND status IN ('queued', 'retry_wait')
  AND concurrency_key > ?2 AND (?3 IS NULL OR concurrency_key <= ?3) AND available_at <= ?5
ORDER BY concurrency_key
LIMIT ?4
