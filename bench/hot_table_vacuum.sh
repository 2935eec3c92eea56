#!/bin/bash
# bench/hot_table_vacuum.sh — what vacuuming the hot table costs with and without history
# (issue 25). Makes database DB (dropped first!) on the server psql reaches ($PSQL, default
# `psql -h 127.0.0.1 -U postgres`), applies migrations/postgres — all of them (`new`: tasks
# partitioned by finish day) or all but the partitioning one (`old`: one table) — inserts
# HISTORY finished tasks (three days old), then runs 100,000 tasks through by SQL (claimed and
# finished 1,000 at a time, as the store's statements change the rows) and times `VACUUM` of
# the hot table (`tasks`, or `tasks_live`).
#
#   bench/hot_table_vacuum.sh DB old|new HISTORY
#   for k in old new; do for h in 0 3000000; do bench/hot_table_vacuum.sh lh_vac_$k$h $k $h; done; done
set -e
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DB=$1; KIND=$2; HIST=$3
[[ $DB =~ ^lh_[a-z0-9_]+$ && ($KIND == old || $KIND == new) && $HIST =~ ^[0-9]+$ ]] || {
    echo "usage: $0 lh_<name> old|new HISTORY" >&2; exit 2; }
P="${PSQL:-psql -h 127.0.0.1 -U postgres} -qAt -v ON_ERROR_STOP=1"
$P -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
for f in "$ROOT"/migrations/postgres/*.sql; do
  if [ "$KIND" = old ] && [[ $f == *partitioned* ]]; then continue; fi
  $P -d $DB -1 -f "$f" >/dev/null
done
if [ "$KIND" = new ]; then
  $P -d $DB -c "SELECT leasehold_tasks_done_partition((now() AT TIME ZONE 'UTC')::date - 3)" >/dev/null
  DONE=", done_on"; DONEV=", (now() AT TIME ZONE 'UTC')::date - 3"; TODAY=", done_on = (now() AT TIME ZONE 'UTC')::date"; HOT=tasks_live
else
  DONE=""; DONEV=""; TODAY=""; HOT=tasks
fi
if [ "$HIST" -gt 0 ]; then
  $P -d $DB -c "INSERT INTO tasks (task_type, payload, status, attempt, lease_epoch, lease_owner, started_at, finished_at, final_outcome, result $DONE)
    SELECT 'hist.t', '{\"n\": 1}', 'succeeded', 1, 1, 'h#1', now() - interval '3 days', now() - interval '3 days', 'succeeded', '{\"ok\": true}' $DONEV
    FROM generate_series(1, $HIST)"
fi
$P -d $DB -c "VACUUM ANALYZE"
# churn: 100k tasks enqueued, claimed, finished, in batches of 1000
$P -d $DB -c "INSERT INTO tasks (task_type, payload) SELECT 'churn', '{\"n\": 1}' FROM generate_series(1, 100000)"
for i in $(seq 1 100); do
  $P -d $DB -c "WITH c AS (SELECT id FROM tasks WHERE status IN ('queued','retry_wait') AND concurrency_key IS NULL $( [ $KIND = new ] && echo "AND done_on = 'infinity'") ORDER BY priority DESC, available_at, id LIMIT 1000 FOR UPDATE SKIP LOCKED)
    UPDATE tasks t SET status='running', lease_owner='a#1', lease_epoch=t.lease_epoch+1, lease_until=now()+interval '30s', heartbeat_at=now(), attempt=t.attempt+1, started_at=now() FROM c WHERE t.id=c.id" \
     -c "UPDATE tasks SET status='succeeded', final_outcome='succeeded', finished_at=now(), lease_until=NULL $TODAY WHERE status='running'"
done
S=$(date +%s%N); $P -d $DB -c "VACUUM $HOT"; E=$(date +%s%N)
echo "$KIND hist=$HIST vacuum $HOT: $(( (E-S)/1000000 )) ms; size $($P -d $DB -c "SELECT pg_size_pretty(pg_total_relation_size('$HOT'))")"
