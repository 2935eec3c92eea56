-- Did holder ?2 give lease ?1 of token ?3 back already? Read when resource_release.sql changed
-- nothing: a release retried after its first reply was lost is a repeat, not fenced.
SELECT token FROM resource_lease_history
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND released_at IS NOT NULL
