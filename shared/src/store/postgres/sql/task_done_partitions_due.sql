-- The days whose partition of finished tasks is past retention: every task in it finished
-- before the day's end, which is at least $1 seconds ago (database time). Oldest first.
SELECT to_date(substr(c.relname, 12), 'YYYYMMDD') AS day
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'tasks'::regclass
  AND c.relname ~ '^tasks_done_[0-9]{8}$'
  AND (to_date(substr(c.relname, 12), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
      <= now() - make_interval(secs => $1)
ORDER BY 1
