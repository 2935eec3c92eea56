-- Owner ?1 renews its leadership of term ?2 until ?3, heartbeat at now ?4 (fenced: no row
-- changes when owner or term no longer match, or it resigned).
UPDATE leader SET lease_until = ?3, heartbeat_at = ?4
WHERE name = 'default' AND owner = ?1 AND term = ?2 AND lease_until IS NOT NULL
