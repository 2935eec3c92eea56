-- History rows of holdings taken before ?1.
DELETE FROM resource_lease_history WHERE acquired_at < ?1
