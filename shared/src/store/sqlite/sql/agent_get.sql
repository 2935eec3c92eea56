-- Agent ?2 as rows::agent reads it, at now ?1 (`leader`: it holds the leader lease now).
SELECT a.*, ?1 AS now,
       EXISTS (SELECT 1 FROM leader l WHERE l.owner = a.id AND l.lease_until > ?1) AS leader
FROM agents a WHERE a.id = ?2
