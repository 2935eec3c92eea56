-- Memberships whose lease ended before ?1 (they go with the history: resource_history_prune.sql).
DELETE FROM shard_members WHERE lease_until < ?1
