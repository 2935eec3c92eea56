-- Does $1 hold the leader lease in term $2 now? FOR SHARE: no election can change the row
-- until the transaction that asked has committed, so what it writes is fenced by the term.
SELECT term FROM leader
WHERE name = 'default' AND owner = $1 AND term = $2 AND lease_until > now()
FOR SHARE
