-- The leased set's index, keyed by (task_type, concurrency_key, id) instead of (task_type,
-- concurrency_key) (issue 22).
--
-- Every claim adds an entry here and every completion leaves one dead. With the old key, all
-- running tasks of a keyless type shared one key value: PostgreSQL kept them as posting lists
-- of one key ordered by heap position, so each claim inserted into the middle of a posting
-- list (splitting it) and each full page set off a bottom-up deletion pass over the heap. With
-- the id last, a claim's entries go to the right edge in id order and the dead ones gather on
-- the left, where index scans mark them dead for reuse. Measured with `leasehold-agent bench`
-- (200,000 tasks, three alternating rounds on one server): the database's CPU a task
-- 35.0 -> 31.7 us (mean), the drain 36.6k -> 40.1k tasks/s (median). Every reader of the index
-- keeps its prefix (type; type and key).
--
-- A plain (not CONCURRENTLY) rebuild inside the migration's transaction: it scans tasks_live
-- once and blocks writes to it meanwhile; run it with the agents stopped, as every migration.
DROP INDEX tasks_leased_type_idx;
CREATE INDEX tasks_leased_type_idx ON tasks_live (task_type, concurrency_key, id)
    WHERE status IN ('running', 'cancel_requested');
