-- Holder ?1 renews its leases ?4 (JSON array of [name, token] pairs) until ?3, heartbeat at now
-- ?2, fenced as resource_renew.sql. Returns one row per lease renewed.
UPDATE resource_leases
SET lease_until = min(?3, coalesce(lock_at_most_until, ?3)), heartbeat_at = ?2
FROM (SELECT json_extract(value, '$[0]') AS held_name,
             json_extract(value, '$[1]') AS held_token
      FROM json_each(?4)) AS h
WHERE resource_leases.name = h.held_name AND resource_leases.token = h.held_token
  AND owner = ?1 AND released_at IS NULL AND lease_until IS NOT NULL
  AND (lock_at_most_until IS NULL OR lock_at_most_until > ?2)
RETURNING name, token, lease_until
