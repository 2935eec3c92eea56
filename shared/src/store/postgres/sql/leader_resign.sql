UPDATE leader SET owner = NULL, lease_until = NULL
WHERE name = 'default' AND owner = $1 AND term = $2
RETURNING term
