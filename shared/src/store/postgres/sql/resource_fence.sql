-- Does $2 hold lease $1 with token $3 now? FOR SHARE: no takeover can change the row until
-- the caller's transaction commits, so the caller's writes in it are fenced by the token.
SELECT token FROM resource_leases
WHERE name = $1 AND owner = $2 AND token = $3 AND released_at IS NULL AND lease_until > now()
FOR SHARE
