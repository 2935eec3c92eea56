-- Owner changes since ?2 (an hour ago) per lease of group ?1 (NULL: of every group).
SELECT h.group_name, h.name, count(*) AS moves
FROM resource_lease_history h
JOIN resource_lease_history p ON p.name = h.name AND p.token = h.token - 1
WHERE h.group_name IS NOT NULL AND (?1 IS NULL OR h.group_name = ?1)
  AND h.acquired_at > ?2 AND p.owner <> h.owner
GROUP BY h.group_name, h.name
