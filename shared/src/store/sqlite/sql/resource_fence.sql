-- Does ?2 hold lease ?1 with token ?3 now (SQLite's clock)? Run on the caller's connection in
-- its BEGIN IMMEDIATE transaction: no takeover can commit before the caller's writes do.
SELECT token FROM resource_leases
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND released_at IS NULL
  AND lease_until > (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
