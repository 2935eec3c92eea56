-- Marks the history row of lease ?1's holding of token ?2 released at ?3 (a retry of the
-- release finds it: resource_release_repeated.sql).
UPDATE resource_lease_history SET released_at = ?3 WHERE name = ?1 AND token = ?2
