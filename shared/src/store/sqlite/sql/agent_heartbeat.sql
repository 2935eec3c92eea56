-- Registry heartbeat of agent ?1 at now ?2: state ?3, ?4 active tasks, local concurrency ?5.
-- A stopped agent stays stopped (no row changes).
UPDATE agents SET heartbeat_at = ?2, state = ?3, active = ?4, local_concurrency = ?5,
       stopped_at = CASE WHEN ?3 = 'stopped' THEN ?2 END
WHERE id = ?1 AND state <> 'stopped'
