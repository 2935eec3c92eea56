-- Owner ?1 gives up its leadership of term ?2 (fenced: no row changes when they no longer
-- match).
UPDATE leader SET owner = NULL, lease_until = NULL
WHERE name = 'default' AND owner = ?1 AND term = ?2
