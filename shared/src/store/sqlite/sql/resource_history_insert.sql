-- The history row of lease ?1's current holding (just taken).
INSERT INTO resource_lease_history (name, group_name, owner, token, acquired_at)
SELECT name, group_name, owner, token, acquired_at FROM resource_leases WHERE name = ?1
