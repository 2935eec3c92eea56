-- History rows, and memberships gone for as long, older than $1 seconds.
WITH m AS (
    DELETE FROM shard_members WHERE lease_until < now() - make_interval(secs => $1)
)
DELETE FROM resource_lease_history WHERE acquired_at < now() - make_interval(secs => $1)
