#!/usr/bin/env bash
# bench/cost.sh — what one task costs PostgreSQL during a drain, Leasehold against the peer
# (graphile_worker's Rust port, /work/shared/bench-peers/gwrs_bench), as PostgreSQL counts it:
# statements, commits, WAL bytes and records, XIDs, execution time, rows (pg_stat_statements,
# WAL position, next XID) and tuple writes (pg_stat_user_tables), per task of the drain.
#
#   bench/cost.sh [AGENT_BIN] [PEER_BIN] [TASKS]
#       defaults: target/release/leasehold-agent, /tmp/gwrs-target/release/gwrs_bench, 100000.
#       Runs `leasehold-agent bench` and `gwrs_bench bulk TASKS 24 500 0`, each on a fresh
#       database, and prints one markdown table plus each one's top drain statements.
#   bench/cost.sh explain [SIZES...]          (default 10000 100000 1000000 10000000)
#       EXPLAIN (ANALYZE, BUFFERS, WAL) of the real claim of 500 tasks (task_claim.sql, after
#       task_claim_lock.sql's planner settings, in BEGIN … ROLLBACK) over SIZES queued tasks.
#       The agent binary (for `migrate`) comes from $LEASEHOLD_AGENT, default as above.
#   bench/cost.sh sides [ROUNDS]              (default 3)
#       What the claim and completion of a task cost if the claimable and leased sets lived in
#       tables of their own, so both updates of the task row could be HOT (issue 22's candidate
#       design), against today's schema and statements. Three databases: `today` (the
#       migrations, the real task_claim.sql / task_complete_many.sql), `sides` (the same tasks
#       table without its five status indexes, plus task_ready and task_leases, and the two
#       statements rewritten for them), `leases` (only the leased set moves to task_leases;
#       the claimable and dead sets are indexed by flags only a claim or a dead-lettering
#       changes), `done` (finished tasks move to tasks_done, partitioned by day: a completion
#       deletes the row and inserts it there; the claim is today's) and `gen` (the flags are
#       stored generated columns of status and a statement trigger keeps task_leases, so
#       today's statements barely change). Per round and database: 50,000 tasks inserted (WAL per task), then
#       claimed 500 at a time and completed by one session in a loop (plpgsql, each claim and
#       each completion its own transaction, synchronous_commit off): the backend's CPU time
#       (/proc/PID/schedstat, so run it where the server is local) and WAL bytes per task.
#       Needs python3 (to rewrite the statements).
#
# Every mode runs on a private PostgreSQL cluster created here (initdb into a temp dir, as the
# `postgres` user when run as root, like tests/src/cluster.rs) with durable settings (fsync,
# synchronous_commit, full_page_writes on) on 127.0.0.1:$COST_PORT (default 5499), stopped
# and deleted on exit. Needs initdb/pg_ctl (pg_config --bindir or /usr/lib/postgresql/*/bin),
# psql and pg_stat_statements. COST_DUMP=FILE also writes every statement's figures as CSV
# (`blks`: shared buffers hit + read).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PORT=${COST_PORT:-5499}
die() { echo "cost.sh: $*" >&2; exit 1; }

MODE=cost; if [[ ${1:-} == explain || ${1:-} == sides ]]; then MODE=$1; shift; fi
if [[ $MODE == cost ]]; then
    AGENT=${1:-$ROOT/target/release/leasehold-agent}
    PEER=${2:-/tmp/gwrs-target/release/gwrs_bench}
    N=${3:-100000}
    [[ -x $PEER ]] || die "peer binary $PEER not found (see /work/shared/bench-peers/gwrs_bench)"
    [[ $N =~ ^[1-9][0-9]*$ ]] || die "TASKS must be a positive integer, not $N"
elif [[ $MODE == explain ]]; then
    AGENT=${LEASEHOLD_AGENT:-$ROOT/target/release/leasehold-agent}
    SIZES=("$@")
    [[ ${#SIZES[@]} -gt 0 ]] || SIZES=(10000 100000 1000000 10000000)
else
    AGENT=${LEASEHOLD_AGENT:-$ROOT/target/release/leasehold-agent}
    ROUNDS=${1:-3}
    [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, not $ROUNDS"
    command -v python3 >/dev/null || die "the sides mode needs python3"
fi
[[ -x $AGENT ]] || die "agent binary $AGENT not found (cargo build --release -p leasehold-agent)"

# --- The private cluster ---------------------------------------------------------------------
BIN=$(pg_config --bindir 2>/dev/null || true)
[[ -x $BIN/initdb ]] || BIN=$(find /usr/lib/postgresql/*/bin -maxdepth 0 2>/dev/null | sort -V | tail -n1 || true)
[[ -x $BIN/initdb && -x $BIN/pg_ctl ]] || die "no initdb/pg_ctl (pg_config --bindir, /usr/lib/postgresql)"
pgtool() { # a PostgreSQL program, as the postgres user when we are root (initdb refuses root)
    local program=$BIN/$1; shift
    if [[ $(id -u) == 0 ]]; then (cd / && runuser -u postgres -- "$program" "$@"); else "$program" "$@"; fi
}
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    die "port $PORT is taken: stop what listens there or set COST_PORT"
fi
DIR=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-cost-XXXXXX")
cleanup() {
    [[ ! -f $DIR/data/postmaster.pid ]] || pgtool pg_ctl -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap cleanup EXIT; trap 'exit 130' INT TERM
[[ $(id -u) != 0 ]] || chown postgres: "$DIR"
pgtool initdb -A trust -U postgres -E UTF8 --no-locale --no-sync -D "$DIR/data" >/dev/null
SETTINGS="-p $PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$DIR -c max_connections=200
 -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c shared_buffers=128MB -c track_io_timing=on
 -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all
 -c pg_stat_statements.max=10000 -c pg_stat_statements.track_utility=on"
pgtool pg_ctl -D "$DIR/data" -l "$DIR/server.log" -o "${SETTINGS//$'\n'/}" -w -t 60 start >/dev/null ||
    { tail -n 20 "$DIR/server.log" >&2; die "the private cluster did not start on port $PORT"; }
export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres
URL=postgres://postgres@127.0.0.1:$PORT
q() { local db=$1; shift; psql -X -q -At -F ' ' -v ON_ERROR_STOP=1 -d "$db" "$@"; }
new_db() { q postgres -c "CREATE DATABASE $1"; q "$1" -c "CREATE EXTENSION pg_stat_statements"; }
wait_idle() { # until no client is connected to database $1 (a backend flushes its statistics on exit)
    until [[ $(q postgres -c "SELECT count(*) FROM pg_stat_activity
                               WHERE datname = '$1' AND backend_type = 'client backend'") == 0 ]]; do sleep 0.2; done
}
echo "private PostgreSQL $(q postgres -c 'SHOW server_version') on port $PORT ($DIR)" >&2

# --- explain: the claim statement's plan over queues of several sizes --------------------------
if [[ $MODE == explain ]]; then
    new_db cost_explain
    "$AGENT" migrate --database-url "$URL/cost_explain" >/dev/null
    SQLDIR=$ROOT/shared/src/store/postgres/sql
    EXPLAIN="BEGIN ISOLATION LEVEL READ COMMITTED;
PREPARE claim_lock AS $(cat "$SQLDIR/task_claim_lock.sql")
;
\o /dev/null
EXECUTE claim_lock(ARRAY['cost.noop']);
\o
PREPARE claim AS $(cat "$SQLDIR/task_claim.sql")
;
EXPLAIN (ANALYZE, BUFFERS, WAL) EXECUTE claim('cost', ARRAY['cost.noop'], 500, 30, '{}');
ROLLBACK;"
    summary=() fence='```'
    for size in "${SIZES[@]}"; do
        [[ $size =~ ^[1-9][0-9]*$ ]] || die "size must be a positive integer, not $size"
        echo "  $size: inserting queued tasks, then VACUUM ANALYZE" >&2
        q cost_explain -c "TRUNCATE tasks"
        for ((made = 0; made < size; made += 1000000)); do
            chunk=$((size - made < 1000000 ? size - made : 1000000))
            q cost_explain -c "INSERT INTO tasks (task_type) SELECT 'cost.noop' FROM generate_series(1, $chunk)"
            ((size <= 1000000)) || echo "  $size: $((made + chunk)) inserted" >&2
        done
        q cost_explain -c "VACUUM ANALYZE tasks"
        plan=$(q cost_explain <<<"$EXPLAIN")
        printf '\n### claim of 500 over %s queued tasks (generic plan, as the store runs it)\n\n%s\n%s\n%s\n' \
            "$size" "$fence" "$plan" "$fence"
        walks=no; grep -q 'Index Scan using tasks_claim_idx' <<<"$plan" && walks=yes
        ms=$(sed -n 's/.*Execution Time: \(.*\) ms/\1/p' <<<"$plan")
        buffers=$(grep -m1 'Buffers:' <<<"$plan" | sed 's/^ *Buffers: //')
        summary+=("| $size | $walks | $ms | $buffers |")
    done
    printf '\n| queued tasks | walks tasks_claim_idx | execution ms | buffers (top node) |\n|---:|---|---:|---|\n'
    printf '%s\n' "${summary[@]}"
    exit 0
fi

# --- sides: today's task row updates against HOT updates with side tables -------------------
if [[ $MODE == sides ]]; then
    SQLDIR=$ROOT/shared/src/store/postgres/sql
    for db in today sides leases done gen; do
        new_db "$db"
        "$AGENT" migrate --database-url "$URL/$db" >/dev/null
    done
    # leases: only the leased set moves out. A flag that only a claim, a retry or a requeue
    # changes keeps the claimable set in tasks' own index, and a flag that only dead-lettering
    # changes keeps the dead-letter index; a plain INSERT is still a whole enqueue.
    q leases -c "DROP INDEX tasks_claim_idx, tasks_dead_idx, tasks_deadline_idx, tasks_finished_idx,
                            tasks_leased_type_idx" \
             -c "ALTER TABLE tasks ADD COLUMN claimable boolean NOT NULL DEFAULT true,
                                   ADD COLUMN dead boolean NOT NULL DEFAULT false" \
             -c "CREATE INDEX tasks_claim_idx ON tasks (priority DESC, available_at, id) WHERE claimable" \
             -c "CREATE INDEX tasks_deadline_idx ON tasks (deadline_at) WHERE claimable AND deadline_at IS NOT NULL" \
             -c "CREATE INDEX tasks_dead_idx ON tasks (id) WHERE dead" \
             -c "CREATE TABLE task_leases (task_id bigint PRIMARY KEY, task_type text NOT NULL,
                     lease_owner text NOT NULL, lease_until timestamptz NOT NULL)"
    q sides -c "DROP INDEX tasks_claim_idx, tasks_dead_idx, tasks_deadline_idx, tasks_finished_idx,
                           tasks_leased_type_idx" \
            -c "CREATE TABLE task_ready (id bigint NOT NULL, priority smallint NOT NULL,
                    available_at timestamptz NOT NULL, task_type text NOT NULL)" \
            -c "CREATE INDEX task_ready_claim ON task_ready (priority DESC, available_at, id)" \
            -c "CREATE TABLE task_leases (task_id bigint PRIMARY KEY, task_type text NOT NULL,
                    lease_owner text NOT NULL, lease_until timestamptz NOT NULL)"
    # done: finished tasks leave tasks for tasks_done (partitioned by day of finishing): the
    # claim is today's, a completion deletes the row and inserts its finished version there.
    q done -c "DROP INDEX tasks_finished_idx" \
           -c "CREATE TABLE tasks_done (LIKE tasks) PARTITION BY RANGE (finished_at)" \
           -c "DO \$\$ BEGIN EXECUTE format('CREATE TABLE tasks_done_today PARTITION OF tasks_done FOR VALUES FROM (%L) TO (%L)', date_trunc('day', now()) - interval '1 day', date_trunc('day', now()) + interval '2 day'); END \$\$" \
           -c "CREATE INDEX tasks_done_id ON tasks_done (id)"
    # gen: claimable and dead are stored generated columns of status, so every writer keeps them
    # right and a completion (running -> succeeded changes neither) stays HOT; the leased set is
    # kept in task_leases by a statement trigger on UPDATE OF status. Statements are today's,
    # with the claim reading the flag and the leased counts reading task_leases.
    q gen -c "DROP INDEX tasks_claim_idx, tasks_dead_idx, tasks_deadline_idx, tasks_finished_idx,
                         tasks_leased_type_idx" \
          -c "ALTER TABLE tasks ADD COLUMN claimable boolean GENERATED ALWAYS AS (status IN ('queued', 'retry_wait')) STORED,
                                ADD COLUMN dead boolean GENERATED ALWAYS AS (status = 'dead') STORED" \
          -c "CREATE INDEX tasks_claim_idx ON tasks (priority DESC, available_at, id) WHERE claimable" \
          -c "CREATE INDEX tasks_deadline_idx ON tasks (deadline_at) WHERE claimable AND deadline_at IS NOT NULL" \
          -c "CREATE INDEX tasks_dead_idx ON tasks (id) WHERE dead" \
          -c "CREATE TABLE task_leases (task_id bigint PRIMARY KEY, task_type text NOT NULL)" \
          -c "CREATE FUNCTION leasehold_track_leases() RETURNS trigger LANGUAGE plpgsql AS \$\$
              BEGIN
                DELETE FROM task_leases WHERE task_id = ANY (ARRAY(
                    SELECT id FROM new_rows WHERE status NOT IN ('running', 'cancel_requested')));
                INSERT INTO task_leases (task_id, task_type)
                SELECT n.id, n.task_type FROM new_rows n WHERE n.status IN ('running', 'cancel_requested')
                ON CONFLICT (task_id) DO NOTHING;
                RETURN NULL;
              END \$\$" \
          -c "CREATE TRIGGER tasks_track_leases AFTER UPDATE ON tasks
              REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION leasehold_track_leases()"
    # One procedure per database: claim 500, complete them, until nothing is left. The real
    # statements' $n parameters become plpgsql variables, so each is planned once and cached.
    python3 - "$SQLDIR" "$DIR" <<'PY'
import re
import sys
sqldir, out = sys.argv[1], sys.argv[2]
def load(name, params):
    text = "\n".join(line.split("--")[0] for line in open(f"{sqldir}/{name}").read().splitlines())
    for a, b in params:
        text = text.replace(a, b)
    return text
lock = load("task_claim_lock.sql", [("$1::text[]", "v_types"), ("$1", "v_types")])
claim = load("task_claim.sql", [("$1", "v_owner"), ("$2::text[]", "v_types"), ("$2", "v_types"),
    ("$3::bigint", "v_batch"), ("$3", "v_batch"), ("$4", "v_ttl"), ("$5::text[]", "v_locked"),
    ("$5", "v_locked")])
complete = load("task_complete_many.sql", [("$10::boolean[]", "v_finished"),
    ("$1::bigint[]", "v_ids"), ("$2::text[]", "v_owners"), ("$3::bigint[]", "v_epochs"),
    ("$4::text[]", "v_outcomes"), ("$5::text[]", "v_statuses"), ("$6::timestamptz[]", "v_retry"),
    ("$7::jsonb[]", "v_errors"), ("$8::boolean[]", "v_setres"), ("$9::jsonb[]", "v_results")])
def claim_tail(extra_set, chosen):
    """The rest of a side-table claim: the task row updated as today's claim does (HOT when no
    index reads what it sets) and a lease row inserted; `chosen` is the CTE of picked ids."""
    return f"""), upd AS (
    UPDATE tasks t
    SET {extra_set}status = 'running', lease_owner = v_owner, lease_epoch = t.lease_epoch + 1,
        lease_until = statement_timestamp() + make_interval(secs => v_ttl),
        heartbeat_at = statement_timestamp(), attempt = t.attempt + 1,
        started_at = statement_timestamp(), progress = NULL, updated_at = statement_timestamp()
    FROM {chosen} WHERE t.id = {chosen}.id
    RETURNING t.id, t.task_type, t.payload, t.priority, t.available_at, t.deadline_at, t.timeout_ms,
              t.attempt, t.max_attempts, t.lease_epoch, t.lease_until, t.idempotency_key, t.result,
              t.last_error, t.created_at, t.finished_at, statement_timestamp() AS db_now
), lease AS (
    INSERT INTO task_leases (task_id, task_type, lease_owner, lease_until)
    SELECT id, task_type, v_owner, lease_until FROM upd
)
SELECT * FROM upd"""
claim_sides = """WITH picked AS (
    SELECT ctid AS tid, id FROM task_ready
    WHERE available_at <= now() AND task_type = ANY(v_types)
    ORDER BY priority DESC, available_at, id
    LIMIT v_batch FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM task_ready r USING picked p WHERE r.ctid = p.tid RETURNING r.id
""" + claim_tail("", "gone")
complete_sides = """WITH input AS (
    SELECT * FROM unnest(v_ids, v_owners, v_epochs, v_outcomes, v_statuses, v_retry, v_errors,
                         v_setres, v_results, v_finished)
        AS i(id, owner, epoch, outcome, status, retry_at, error, set_result, result, finished)
    ORDER BY 1
), upd AS (
    UPDATE tasks t
    SET status = i.status, available_at = coalesce(i.retry_at, t.available_at),
        last_error = coalesce(i.error, t.last_error), finished_at = CASE WHEN i.finished THEN now() END,
        lease_until = NULL, result = CASE WHEN i.set_result THEN i.result ELSE t.result END,
        final_outcome = CASE WHEN i.finished THEN i.outcome END, updated_at = now()
    FROM input i
    WHERE t.id = i.id AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch
      AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    RETURNING t.id, t.status
), del AS (
    DELETE FROM task_leases l USING upd u WHERE l.task_id = u.id
)
SELECT u.id, u.status FROM upd u"""
planner = ("PERFORM set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), "
           "set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true);")
def procedure(db, claim_sql, complete_sql, before_claim):
    return f"""CREATE PROCEDURE drain() LANGUAGE plpgsql AS $proc$
DECLARE
  v_owner text := 'sim#1'; v_types text[] := ARRAY['cost.noop']; v_batch bigint := 500;
  v_ttl float8 := 30; v_locked text[] := '{{}}';
  v_ids bigint[]; v_owners text[]; v_epochs bigint[]; v_outcomes text[]; v_statuses text[];
  v_retry timestamptz[]; v_errors jsonb[]; v_setres boolean[]; v_results jsonb[];
  v_finished boolean[]; rec1 record; rec2 record; n int;
BEGIN
  LOOP
    {before_claim}
    v_ids := '{{}}'; v_epochs := '{{}}'; n := 0;
    FOR rec1 IN {claim_sql} LOOP
      v_ids := v_ids || rec1.id; v_epochs := v_epochs || rec1.lease_epoch::bigint; n := n + 1;
    END LOOP;
    COMMIT;
    EXIT WHEN n = 0;
    v_owners := array_fill(v_owner, ARRAY[n]);
    v_outcomes := array_fill('succeeded'::text, ARRAY[n]); v_statuses := v_outcomes;
    v_retry := array_fill(NULL::timestamptz, ARRAY[n]); v_errors := array_fill(NULL::jsonb, ARRAY[n]);
    v_setres := array_fill(true, ARRAY[n]); v_results := array_fill('null'::jsonb, ARRAY[n]);
    v_finished := array_fill(true, ARRAY[n]);
    FOR rec2 IN {complete_sql} LOOP NULL; END LOOP;
    COMMIT;
  END LOOP;
END $proc$;
"""
claim_leases = """WITH picked AS (
    SELECT id FROM tasks
    WHERE claimable AND available_at <= now() AND (deadline_at IS NULL OR deadline_at > now())
      AND task_type = ANY(v_types)
    ORDER BY priority DESC, available_at, id
    LIMIT v_batch FOR UPDATE SKIP LOCKED
""" + claim_tail("claimable = false, ", "picked")
complete_done = complete.split("upd AS (")[0] + """gone AS (
    DELETE FROM tasks t USING input i
    WHERE t.id = i.id AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch
      AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END
    RETURNING t.*, i.status AS new_status, i.outcome, i.set_result, i.result AS new_result
), moved AS (
    INSERT INTO tasks_done (id, task_type, payload, priority, status, available_at, deadline_at,
        timeout_ms, attempt, max_attempts, lease_owner, lease_epoch, lease_until, heartbeat_at,
        idempotency_key, progress, result, last_error, created_at, started_at, finished_at,
        updated_at, final_outcome)
    SELECT id, task_type, payload, priority, new_status, available_at, deadline_at, timeout_ms,
        attempt, max_attempts, lease_owner, lease_epoch, NULL, heartbeat_at, idempotency_key,
        progress, CASE WHEN set_result THEN new_result ELSE result END, last_error, created_at,
        started_at, now(), now(), outcome
    FROM gone
)
SELECT id, new_status FROM gone"""
open(f"{out}/done.sql", "w").write(procedure("done", claim, complete_done, f"PERFORM * FROM ({lock}) l;"))
claim_gen = re.sub(r"FROM tasks r\s+WHERE r\.status IN \('running', 'cancel_requested'\)",
                   "FROM task_leases r WHERE true",
                   claim.replace("status IN ('queued', 'retry_wait')", "claimable"))
assert "claimable" in claim_gen and claim_gen.count("task_leases") == 2, claim_gen
open(f"{out}/gen.sql", "w").write(procedure("gen", claim_gen, complete, f"PERFORM * FROM ({lock}) l;"))
open(f"{out}/leases.sql", "w").write(procedure("leases", claim_leases, complete_sides, planner))
open(f"{out}/today.sql", "w").write(procedure("today", claim, complete, f"PERFORM * FROM ({lock}) l;"))
open(f"{out}/sides.sql", "w").write(procedure("sides", claim_sides, complete_sides, planner))
PY
    for db in today sides leases done gen; do q "$db" -f "$DIR/$db.sql"; done
    N=50000
    declare -A rows
    for ((round = 1; round <= ROUNDS; round++)); do
        for db in today sides leases done gen; do
            ready=""; clear="TRUNCATE tasks;"; finished=tasks
            if [[ $db == sides ]]; then
                clear="TRUNCATE tasks, task_ready, task_leases;"
                ready="INSERT INTO task_ready SELECT id, priority, available_at, task_type FROM tasks;"
            fi
            [[ $db != leases ]] || clear="TRUNCATE tasks, task_leases;"
            [[ $db != gen ]] || clear="TRUNCATE tasks, task_leases;"
            [[ $db != done ]] || { clear="TRUNCATE tasks, tasks_done;"; finished=tasks_done; }
            row=$(q "$db" <<SQL
$clear
SELECT pg_current_wal_lsn() AS e0 \gset
INSERT INTO tasks (task_type) SELECT 'cost.noop' FROM generate_series(1, $N);
$ready
SELECT round((pg_current_wal_lsn() - :'e0'::pg_lsn) / $N.0) AS enq \gset
VACUUM ANALYZE;
SELECT pg_current_wal_lsn() AS d0, pg_backend_pid() AS pid \gset
\\setenv COST_PID :pid
SET synchronous_commit = off;
\\set cpu0 \`awk '{print \$1}' /proc/\$COST_PID/schedstat\`
CALL drain();
\\set cpu1 \`awk '{print \$1}' /proc/\$COST_PID/schedstat\`
SELECT :enq, round((:cpu1 - :cpu0) / 1000.0 / $N, 2),
       round((pg_current_wal_lsn() - :'d0'::pg_lsn) / $N.0),
       (SELECT count(*) FROM $finished WHERE status = 'succeeded'),
       (SELECT round(100.0 * n_tup_hot_upd / greatest(n_tup_upd, 1)) FROM pg_stat_user_tables
        WHERE relname = 'tasks');
SQL
)
            read -r enq us wal done hot <<<"$row"
            [[ $done == "$N" ]] || die "$db round $round: $done of $N tasks succeeded"
            echo "  round $round, $db: drain $us µs and $wal B of WAL a task (HOT $hot % so far), enqueue $enq B" >&2
            rows[$db]+="$us $wal $enq"$'\n'
        done
    done
    median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
    printf '\n| per task, median of %s rounds (%s tasks each) | today | side tables | leases only | done table | generated flags | sides / today | leases / today | done / today | gen / today |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n' "$ROUNDS" "$N"
    for col in 1:"claim + completion, µs (one session, CPU)" 2:"claim + completion, WAL bytes" 3:"insert, WAL bytes"; do
        i=${col%%:*} label=${col#*:}
        m=()
        for db in today sides leases done gen; do m+=("$(cut -d' ' -f"$i" <<<"${rows[$db]}" | grep . | median)"); done
        printf '| %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f |\n' "$label" "${m[0]}" "${m[1]}" "${m[2]}" "${m[3]}" "${m[4]}" \
            "$(awk -v a="${m[0]}" -v b="${m[1]}" 'BEGIN {print b / a}')" \
            "$(awk -v a="${m[0]}" -v b="${m[2]}" 'BEGIN {print b / a}')" \
            "$(awk -v a="${m[0]}" -v b="${m[3]}" 'BEGIN {print b / a}')" \
            "$(awk -v a="${m[0]}" -v b="${m[4]}" 'BEGIN {print b / a}')"
    done
    exit 0
fi

# --- cost: one measured run per system ------------------------------------------------------------
# Per system: the statements of its enqueue and of the bench harness (migrations, the peer's
# progress poll, Leasehold's cleanup of the bench's task type), by text; every other statement
# is the drain. IN_TX: the drain's writes that run inside BEGIN … COMMIT (not autocommitted).
declare -A ENQ HARNESS IN_TX ENQ_TX
ENQ[leasehold]='unnest\(.*insert into tasks \('
HARNESS[leasehold]='_sqlx_migrations|delete from tasks where task_type|delete from task_attempt(s|_rows) a using deleted'
# Leasehold's claim, completion and lease renewal/release/recovery (store/postgres: claim.rs,
# holder.rs, maintenance.rs); its agent, leader and clean-up statements autocommit.
IN_TX[leasehold]='^with (pol|input|alive|cur) as'
ENQ_TX[leasehold]=1   # each bulk enqueue is BEGIN; INSERT; COMMIT
ENQ[peer]='add_jobs|^analyze graphile_worker\._private_jobs'  # it analyzes after a bulk add of 10,000+
HARNESS[peer]='count\(\*\) from graphile_worker\._private_jobs|^delete from graphile_worker\._private_jobs$|migrations'
IN_TX[peer]='^$'  # none: the peer issues no BEGIN
ENQ_TX[peer]=0
q postgres <<'SQL'
CREATE EXTENSION pg_stat_statements;
CREATE TABLE stmt (tool text, phase text, toplevel bool, query text, calls numeric, ms numeric,
                   wal_bytes numeric, wal_records numeric, wal_fpi numeric, rows numeric,
                   blks numeric);
CREATE TABLE fact (tool text, key text, value numeric);
CREATE TABLE tbl (tool text, name text, upd numeric, hot numeric, ins numeric, del numeric);
CREATE FUNCTION fmt(v numeric) RETURNS text LANGUAGE sql  -- 4 decimals below 1, 3 below 10, else 1
    RETURN CASE WHEN abs(v) < 1 THEN round(v, 4) WHEN abs(v) < 10 THEN round(v, 3) ELSE round(v, 1) END::text;
SQL

# measure TOOL DB COMMAND...: resets the statistics, runs COMMAND, records what it cost.
measure() {
    local tool=$1 db=$2 lsn0 xid0 lsn1 xid1 t0 t1; shift 2
    wait_idle "$db"
    q "$db" -c "SELECT pg_stat_reset()" >/dev/null
    q postgres -c "SELECT pg_stat_statements_reset()" >/dev/null
    read -r lsn0 xid0 < <(q postgres -c "SELECT pg_current_wal_lsn(), pg_snapshot_xmax(pg_current_snapshot())")
    t0=$(date +%s.%N)
    "$@" 2>&1 | sed "s/^/  [$tool] /" >&2
    t1=$(date +%s.%N)
    wait_idle "$db"
    read -r lsn1 xid1 < <(q postgres -c "SELECT pg_current_wal_lsn(), pg_snapshot_xmax(pg_current_snapshot())")
    q postgres -v tool="$tool" -v db="$db" -v enq="${ENQ[$tool]}" -v harness="${HARNESS[$tool]}" \
        -v lsn0="$lsn0" -v lsn1="$lsn1" -v xid0="$xid0" -v xid1="$xid1" -v n="$N" -v t0="$t0" -v t1="$t1" \
        -v enq_tx="${ENQ_TX[$tool]}" <<'SQL'
INSERT INTO stmt
SELECT :'tool', CASE WHEN query ~* :'enq' THEN 'enqueue' WHEN query ~* :'harness' THEN 'harness'
                     ELSE 'drain' END,
       toplevel, query, calls, total_exec_time::numeric, wal_bytes, wal_records, wal_fpi, rows,
       blks
FROM (SELECT btrim(regexp_replace(regexp_replace(query, '--[^\n]*', '', 'g'), '\s+', ' ', 'g')) AS query,
             toplevel, calls, total_exec_time, wal_bytes, wal_records, wal_fpi, rows,
             shared_blks_hit + shared_blks_read AS blks
      FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = :'db')) s;
-- An enqueue in its own transaction brought one BEGIN and one COMMIT each: not the drain's.
UPDATE stmt d SET calls = d.calls - e.calls, ms = d.ms * (d.calls - e.calls) / d.calls
FROM (SELECT sum(calls) AS calls FROM stmt WHERE tool = :'tool' AND phase = 'enqueue' AND toplevel) e
WHERE :enq_tx = 1 AND d.tool = :'tool' AND d.phase = 'drain' AND d.toplevel AND d.query ~* '^(begin|commit)';
INSERT INTO fact VALUES (:'tool', 'n', :n), (:'tool', 'seconds', :t1 - :t0),
    (:'tool', 'lsn_bytes', pg_wal_lsn_diff(:'lsn1', :'lsn0')), (:'tool', 'xids', :xid1 - :xid0);
SQL
    q "$db" -c "SELECT name, upd, hot, ins, del FROM (SELECT schemaname || '.' || relname AS name,
        n_tup_upd AS upd, n_tup_hot_upd AS hot, n_tup_ins AS ins, n_tup_del AS del FROM pg_stat_user_tables) s
        WHERE upd + ins + del > 0" | while read -r name upd hot ins del; do
        q postgres -c "INSERT INTO tbl VALUES ('$tool', '$name', $upd, $hot, $ins, $del)"
    done
}

new_db cost_leasehold
"$AGENT" migrate --database-url "$URL/cost_leasehold" >/dev/null
# No pickup phase (--latency-samples 0): the agents stop right after the drain.
measure leasehold cost_leasehold "$AGENT" bench --database-url "$URL/cost_leasehold" --tasks "$N" \
    --latency-samples 0 --output json
new_db cost_peer
DATABASE_URL=$URL/cost_peer "$PEER" bulk 0 24 500 0 >/dev/null # its migrations, outside the measure
measure peer cost_peer env DATABASE_URL="$URL/cost_peer" "$PEER" bulk "$N" 24 500 0

echo
echo "## What one task costs PostgreSQL during a drain ($N tasks; PostgreSQL $(q postgres -c 'SHOW server_version'), fsync and synchronous_commit on)"
echo
# A write: a data-modifying statement (a read may write WAL too, pruning pages, but takes no XID).
q postgres -v in_tx_l="${IN_TX[leasehold]}" -v in_tx_p="${IN_TX[peer]}" -v dml='\m(insert|update|delete|merge)\M' <<'SQL'
WITH f AS (SELECT tool, max(value) FILTER (WHERE key = 'n') AS n,
                  max(value) FILTER (WHERE key = 'seconds') AS sec,
                  max(value) FILTER (WHERE key = 'lsn_bytes') AS lsn,
                  max(value) FILTER (WHERE key = 'xids') AS xids FROM fact GROUP BY tool),
s AS (SELECT tool,
        sum(calls) FILTER (WHERE phase = 'drain') AS stmts,
        sum(calls) FILTER (WHERE phase = 'drain' AND query ~* '^commit') AS commit_calls,
        sum(calls) FILTER (WHERE phase = 'drain' AND wal_records > 0 AND query ~* :'dml'
            AND query !~* CASE tool WHEN 'leasehold' THEN :'in_tx_l' ELSE :'in_tx_p' END) AS auto_writes,
        sum(wal_bytes) FILTER (WHERE phase = 'drain') AS wal, sum(wal_bytes) AS wal_all,
        sum(wal_bytes) FILTER (WHERE phase <> 'drain') AS wal_other,
        sum(wal_records) FILTER (WHERE phase = 'drain') AS recs,
        sum(wal_fpi) FILTER (WHERE phase = 'drain') AS fpi,
        sum(ms) FILTER (WHERE phase = 'drain') AS ms, sum(rows) FILTER (WHERE phase = 'drain') AS rows,
        sum(calls) FILTER (WHERE phase = 'enqueue') AS enq_tx,
        sum(calls) FILTER (WHERE phase = 'harness' AND rows > 0 AND query ~* :'dml') AS harness_tx
      FROM stmt WHERE toplevel GROUP BY tool),
d AS (SELECT tool, sum(rows) AS rows FROM stmt WHERE phase = 'harness' AND query ~* 'delete\s+from' GROUP BY tool),
t AS (SELECT tool, sum(upd) AS upd, sum(hot) AS hot, sum(ins) AS ins, sum(del) AS del FROM tbl GROUP BY tool),
m AS (SELECT f.tool, x.ord, x.measure, x.value FROM f JOIN s USING (tool) JOIN t USING (tool)
      LEFT JOIN d USING (tool), LATERAL (VALUES
        (1, 'statements (calls, BEGIN/COMMIT included)', s.stmts / f.n),
        (2, 'commits (COMMIT calls + autocommitted writes)', (coalesce(s.commit_calls, 0) + coalesce(s.auto_writes, 0)) / f.n),
        (3, 'XIDs (Δ next xid − enqueue and harness write transactions)', (f.xids - s.enq_tx - coalesce(s.harness_tx, 0)) / f.n),
        (4, 'WAL bytes (drain statements, pg_stat_statements)', s.wal / f.n),
        (5, 'WAL bytes (Δ LSN of the whole run − other statements'' WAL)', (f.lsn - coalesce(s.wal_other, 0)) / f.n),
        (6, 'WAL records', s.recs / f.n),
        (7, 'WAL full-page images', s.fpi / f.n),
        (8, 'DB execution time, µs', s.ms * 1000 / f.n),
        (9, 'rows (returned or changed)', s.rows / f.n),
        (10, 'tuples updated (all tables)', t.upd / f.n),
        (11, 'of which HOT', t.hot / f.n),
        (12, 'HOT ratio', t.hot / nullif(t.upd, 0)),
        (13, 'tuples inserted (− the enqueue''s one per task)', (t.ins - f.n) / f.n),
        (14, 'tuples deleted (− the harness''s cleanup)', (t.del - coalesce(d.rows, 0)) / f.n),
        (90, 'whole run: WAL bytes, all statements / Δ LSN', s.wal_all / f.lsn),
        (91, 'whole run: wall seconds (enqueue + drain + setup)', f.sec)) AS x(ord, measure, value))
SELECT '| per task of the drain | Leasehold | peer (graphile_worker rs) | ratio L/peer |' UNION ALL
SELECT '|---|---:|---:|---:|' UNION ALL
(SELECT format('| %s | %s | %s | %s |', l.measure, fmt(l.value), fmt(p.value),
               coalesce(round(l.value / nullif(p.value, 0), 2)::text, '—'))
 FROM m l JOIN m p USING (ord) WHERE l.tool = 'leasehold' AND p.tool = 'peer' ORDER BY ord);
SQL
cat <<'EOF'

Rules. Statements, WAL, time and rows sum the top-level statements of the drain (nested ones,
inside functions and triggers, are part of their caller's figures); the enqueue (Leasehold's
bulk INSERT … unnest with its BEGIN/COMMIT, the peer's add_jobs and its ANALYZE after a bulk add)
and the harness (migration checks, the peer bench's count(*) poll, Leasehold bench's final
DELETE of its task type) are left out.
Commits: every COMMIT, plus every call of a drain INSERT/UPDATE/DELETE (or WITH holding one)
that wrote WAL outside BEGIN … COMMIT (autocommit). Leasehold runs its claim, completion and
lease statements inside, its agent/leader/clean-up ones outside; the peer issues no BEGIN.
pg_stat_statements sums calls, so a call or COMMIT that changed nothing (an empty claim) counts
too: these are commit requests. XIDs count the transactions that did write (a commit record and
a WAL flush each): Δ next xid, minus one per enqueue call and per harness statement that
changed rows; autoanalyze may add a few.
Execution time excludes the commit's WAL flush (it happens after the statement ends).
Δ LSN also holds commit records, checkpoints and autovacuum, which no statement is charged with.
EOF
q postgres <<'SQL'
SELECT format(E'\n%s tables (whole run, per task): %s', tool, string_agg(format('%s upd %s hot %s ins %s del %s',
       name, fmt(upd / n), fmt(hot / n), fmt(ins / n), fmt(del / n)), '; ' ORDER BY name))
FROM tbl JOIN (SELECT tool, value AS n FROM fact WHERE key = 'n') f USING (tool) GROUP BY tool ORDER BY tool;
SQL
for tool in leasehold peer; do
    printf '\n### %s: top 8 drain statements by total time\n\n| statement | calls | µs/task | WAL B/task |\n|---|---:|---:|---:|\n' "$tool"
    q postgres -v tool="$tool" <<'SQL'
SELECT format('| `%s` | %s | %s | %s |', replace(left(query, 70), '|', '\|'), calls, fmt(ms * 1000 / n),
              fmt(wal_bytes / n))
FROM stmt JOIN (SELECT tool, value AS n FROM fact WHERE key = 'n') f USING (tool)
WHERE tool = :'tool' AND phase = 'drain' AND toplevel ORDER BY ms DESC LIMIT 8;
SQL
done
[[ -z ${COST_DUMP:-} ]] || q postgres -c "\\copy (SELECT * FROM stmt ORDER BY tool, phase, ms DESC) TO '$COST_DUMP' CSV HEADER"
