-- Taken by a policy change before it reads the row: waits for claims in flight (which hold the
-- guard shared) and serialises policy changes, so none is lost and a new limit is never
-- undercut by a claim that read the old one. While it waits, new claims queue behind it, so it
-- waits at most 2 s (lock_timeout, set first by the subquery) and then fails as "busy" rather
-- than stopping every claimer behind a stalled claim transaction (which
-- idle_in_transaction_session_timeout ends).
SELECT pg_advisory_xact_lock(19529, 0) IS NULL AS waited
FROM (SELECT set_config('lock_timeout', '2s', true) OFFSET 0) AS bounded
