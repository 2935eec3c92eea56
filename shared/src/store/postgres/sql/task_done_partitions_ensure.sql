-- The day partitions of finished tasks for today (UTC) and the next three days, created and
-- attached where missing (leasehold_tasks_done_partition, migration 20261210000001); a day
-- without one finishes into tasks_done_default. Returns how many it created.
SELECT count(*) FILTER (WHERE leasehold_tasks_done_partition((now() AT TIME ZONE 'UTC')::date + n))
    AS created
FROM generate_series(0, 3) AS n
