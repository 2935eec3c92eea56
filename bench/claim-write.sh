#!/usr/bin/env bash
# bench/claim-write.sh — how much of the drain the claim's write of each task row costs (issue 22).
#
#   bench/claim-write.sh [ROUNDS] [TASKS]          (defaults 3 and 200000)
#
# Builds four agents from this checkout's HEAD (in a temporary git worktree, so the checkout
# is left as it is) and runs `leasehold-agent bench --tasks TASKS --latency-samples 0 --output json`
# with each, alternating with the peer (`gwrs_bench bulk TASKS 24 500 0`), every run on a fresh
# database after a CHECKPOINT:
#
#   today       the claim and completion as shipped;
#   range+write today's per-row claim UPDATE (status, owner, epoch, lease times), but the rows
#               found by a shared cursor's id range (claim-write/range.sql): no walk of
#               tasks_claim_idx, no FOR UPDATE SKIP LOCKED, no policy CTEs;
#   range+HOT   the same write without `status`, the one column it sets that an index reads, so
#               PostgreSQL updates the row in place (HOT, no new index entries); the rows stay
#               'queued' and this variant's completion accepts them;
#   range only  a claim that writes no task row: the cursor's range read as it is
#               (claim-write/no_write_end.sql); its completion checks no fence, since the lease
#               it hands out is written nowhere.
# claim-write/variant.py writes each variant into the worktree from the shipped statements. The
# run order of the four rotates from round to round; the peer runs first in each.
#
# The three range variants are DIAGNOSES, never to ship: correct only for the bench (one type, no
# limits, no priorities or delays, ids claimed in order, one agent). They split today's claim into
# finding the rows and writing them, and so tell which of the two a redesign has to remove.
#
# Environment: LEASEHOLD_BENCH_URL (a PostgreSQL URL without the database, default
# postgres://postgres@127.0.0.1:5432; the role must create databases and run CHECKPOINT),
# PEER_BIN (default /tmp/gwrs-target/release/gwrs_bench, see /work/shared/bench-peers),
# CLAIM_WRITE_TARGET (a cargo target directory to build in and keep between runs; default a
# temporary one, a cold release build of ~6 minutes, then three incremental ones).
set -euo pipefail
export LC_ALL=C
# psql without the NOTICEs of DROP … IF EXISTS (only psql: the agents and the peer read PGOPTIONS too)
psql() { PGOPTIONS="-c client_min_messages=warning" command psql "$@"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${1:-3}
TASKS=${2:-200000}
BASE=${LEASEHOLD_BENCH_URL:-postgres://postgres@127.0.0.1:5432}
PEER=${PEER_BIN:-/tmp/gwrs-target/release/gwrs_bench}
die() { echo "claim-write.sh: $*" >&2; exit 1; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, not $ROUNDS"
[[ $TASKS =~ ^[1-9][0-9]*$ ]] || die "TASKS must be a positive integer, not $TASKS"
[[ -x $PEER ]] || die "peer binary $PEER not found (see /work/shared/bench-peers/gwrs_bench)"
command -v python3 >/dev/null || die "needs python3"
psql -X -q -d "$BASE/postgres" -c 'SELECT 1' >/dev/null 2>&1 || die "no PostgreSQL answers at $BASE"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-claim-write-XXXXXX")
TREE=$WORK/tree
TARGET=${CLAIM_WRITE_TARGET:-$WORK/target}
VARIANTS=(today update hot nowrite)
declare -A LABEL=([today]=today [update]=range+write [hot]=range+HOT [nowrite]="range only")
# Databases named for this run, so two runs (or other databases) are never dropped by mistake.
DB=claim_write_$$
cleanup() {
    for db in peer "${VARIANTS[@]}"; do
        psql -X -q -d "$BASE/postgres" -c "DROP DATABASE IF EXISTS ${DB}_$db WITH (FORCE)" 2>/dev/null || true
    done
    git -C "$ROOT" worktree remove --force "$TREE" 2>/dev/null || true
    rm -rf "$WORK"
    git -C "$ROOT" worktree prune 2>/dev/null || true
}
trap cleanup EXIT; trap 'exit 130' INT; trap 'exit 143' TERM

git -C "$ROOT" worktree add -q --detach "$TREE" HEAD
SQL=$TREE/shared/src/store/postgres/sql
build() { # build the worktree as it is now and keep the agent as $WORK/$1
    echo "building $1 …" >&2
    (cd "$TREE" && CARGO_TARGET_DIR=$TARGET cargo build -q --release -p leasehold-agent) || die "build of $1 failed"
    cp "$TARGET/release/leasehold-agent" "$WORK/$1"
}
for v in "${VARIANTS[@]}"; do
    if [[ $v != today ]]; then
        git -C "$TREE" checkout -q -- "$SQL"
        python3 "$TREE/bench/claim-write/variant.py" "$v" "$SQL" || die "the shipped statements changed: update bench/claim-write"
    fi
    build "$v"
done

q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$BASE/$1" -c "$2"; }
fresh() { q postgres "DROP DATABASE IF EXISTS $1 WITH (FORCE)"; q postgres "CREATE DATABASE $1"; }
checkpoint() { q postgres CHECKPOINT; }
# A field of the bench's JSON line: a number, or `-` when the bench reports none (null).
field() {
    python3 -c 'import json, sys
v = json.loads(sys.stdin.read().strip().splitlines()[-1]).get(sys.argv[1])
print("-" if v is None else v)' "$1"
}
number='^[0-9]+([.][0-9]+)?$'

declare -A drain db agent
peer_drain=()
for ((r = 1; r <= ROUNDS; r++)); do
    fresh "${DB}_peer"; checkpoint
    out=$(DATABASE_URL=$BASE/${DB}_peer "$PEER" bulk "$TASKS" 24 500 0)
    # Only a drain that finished (left=0): after its 170 s limit the peer reports a partial one.
    p=$(sed -n 's/.*process n=.*= \([0-9][0-9]*\) jobs\/s (left=0)$/\1/p' <<<"$out")
    [[ -n $p ]] || die "no finished drain from the peer: $out"
    peer_drain+=("$p")
    line="round $r: peer $p"
    order=("${VARIANTS[@]:$(((r - 1) % ${#VARIANTS[@]}))}" "${VARIANTS[@]:0:$(((r - 1) % ${#VARIANTS[@]}))}")
    for v in "${order[@]}"; do
        name=${DB}_$v
        fresh "$name"
        "$WORK/$v" migrate --database-url "$BASE/$name" >/dev/null
        [[ $v == today ]] || q "$name" "CREATE TABLE claim_write_cursor (pos bigint NOT NULL); INSERT INTO claim_write_cursor VALUES (0)"
        checkpoint
        json=$("$WORK/$v" bench --database-url "$BASE/$name" --tasks "$TASKS" --latency-samples 0 --output json 2>"$WORK/$v.err") ||
            die "$v: bench failed: $(tail -n 5 "$WORK/$v.err")"
        d=$(field processed_per_s <<<"$json")
        [[ $d =~ $number ]] || die "$v: no drain figure in $json"
        drain[$v]+="$d "; db[$v]+="$(field db_cpu_us_per_task <<<"$json") "; agent[$v]+="$(field agent_cpu_us_per_task <<<"$json") "
        line+=" | ${LABEL[$v]} $(python3 -c 'import sys; d, p = map(float, sys.argv[1:]); print("%.0f (%.2f×)" % (d, d / p))' "$d" "$p")"
        q postgres "DROP DATABASE $name"
    done
    q postgres "DROP DATABASE ${DB}_peer"
    echo "$line" >&2
done

median() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x != '-']; print('%.1f' % statistics.median(v) if v else '-')" "$@"; }
ratios() { python3 -c "import statistics,sys; n=len(sys.argv)//2; a=sys.argv[1:n+1]; b=sys.argv[n+1:]; print('%.2f×' % statistics.median(float(x)/float(y) for x,y in zip(a,b)))" "$@"; }
printf '\n| %s rounds, %s tasks, medians | drain, tasks/s | drain / peer | database CPU µs a task | agent CPU µs a task |\n|---|---:|---:|---:|---:|\n' "$ROUNDS" "$TASKS"
printf '| peer (gwrs_bench) | %s | 1.00× | | |\n' "$(median "${peer_drain[@]}")"
for v in "${VARIANTS[@]}"; do
    # shellcheck disable=SC2086
    printf '| %s | %s | %s | %s | %s |\n' "${LABEL[$v]}" "$(median ${drain[$v]})" "$(ratios ${drain[$v]} "${peer_drain[@]}")" \
        "$(median ${db[$v]})" "$(median ${agent[$v]})"
done
