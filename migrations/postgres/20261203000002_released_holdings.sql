-- A holding given back by its holder is marked in its history row (issue 18): a release
-- retried after its first commit's reply was lost finds it there and is a repeat (nothing
-- changes), not fenced. A forced release or a takeover never marks it.
ALTER TABLE resource_lease_history ADD COLUMN released_at timestamptz;
