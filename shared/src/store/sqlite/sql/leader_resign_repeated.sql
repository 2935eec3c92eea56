-- Did the holder of term ?1 resign already? Read when leader_resign.sql changed nothing: only
-- a resignation leaves the leader row without an owner, and a new owner starts a new term.
SELECT term FROM leader
WHERE name = 'default' AND owner IS NULL AND term = ?1 AND term > 0
