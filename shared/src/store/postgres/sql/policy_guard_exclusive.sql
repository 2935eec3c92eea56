-- Taken by a policy change before it reads the row: waits for claims in flight (which hold the
-- guard shared) and serialises policy changes, so none is lost and a new limit is never
-- undercut by a claim that read the old one.
SELECT pg_advisory_xact_lock(19529, 0)
