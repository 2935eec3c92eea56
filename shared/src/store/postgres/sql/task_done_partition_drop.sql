-- Retention of one day's partition: $1 day, $2 the statuses whose retention is due, $3 that
-- retention in seconds (leasehold_tasks_done_drop, migration 20261210000001). Run in a
-- transaction with a short lock_timeout: dropping a partition locks tasks for an instant.
SELECT leasehold_tasks_done_drop($1::date, $2::text[], $3::double precision) AS dropped
