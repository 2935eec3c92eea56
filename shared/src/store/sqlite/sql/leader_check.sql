-- Does ?1 hold the leader lease in term ?2 at now ?3? Read under the write lock, so no
-- election can change the row before the transaction that asked commits.
SELECT term FROM leader
WHERE name = 'default' AND owner = ?1 AND term = ?2 AND lease_until > ?3
