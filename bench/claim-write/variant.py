"""bench/claim-write.sh: write one diagnosis variant's claim and completion into a worktree.

    variant.py VARIANT SQL_DIR   (VARIANT: update | hot | nowrite)

Starts from the worktree's own task_claim.sql and task_complete_many.sql, so each variant
changes only what it is about and follows the shipped statements. Exits 1 when a statement no
longer reads as expected (the script then says to update it).
"""
import os
import sys

variant, sql = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))


def read(path):
    with open(path) as f:
        return f.read()


def edit(text, old, new):
    if old not in text:
        sys.exit(f"variant.py: {old!r} not found")
    return text.replace(old, new, 1)


claim = read(os.path.join(sql, "task_claim.sql"))
complete = read(os.path.join(sql, "task_complete_many.sql"))
head = read(os.path.join(here, "range.sql"))
fenced = ("AND CASE WHEN t.status IN ('running', 'cancel_requested') THEN true ELSE false END")

if variant in ("update", "hot"):
    # Today's claim from its UPDATE on, the rows in `chosen` found by range.sql.
    start = claim.find("UPDATE tasks t\nSET status = 'running',")
    if start < 0:
        sys.exit("variant.py: the claim's UPDATE not found")
    end = edit(claim[start:], "(SELECT array_agg(scope) FROM rate) AS rated", "NULL::text[] AS rated")
    if variant == "hot":
        # Without `status`, the one column it sets that an index reads (the partial indexes'
        # predicates), the write can be HOT. The row stays 'queued': the completion accepts that.
        # Renewals (lease_renew_many.sql, which tests the status) find none of these leases,
        # nor of the nowrite variant's: their gains include the renewals' writes, a few hundred
        # rows a heartbeat in a drain of no-op tasks against 200,000 claims.
        end = edit(end, "SET status = 'running',\n    lease_owner", "SET lease_owner")
        complete = edit(complete, fenced,
                        "AND CASE WHEN t.status IN ('running', 'cancel_requested', 'queued') THEN true ELSE false END")
    claim = head + end
elif variant == "nowrite":
    claim = head + read(os.path.join(here, "no_write_end.sql"))
    # No lease was written: no owner, epoch or status test; the attempt the agent was told of
    # (one too low after a snooze, which the bench's no-op tasks never do).
    complete = edit(complete,
                    "AND t.lease_owner = i.owner AND t.lease_epoch = i.epoch\n      " + fenced, "")
    complete = edit(complete, "RETURNING t.id, t.status, t.available_at, t.lease_epoch,",
                    "RETURNING t.id, t.status, t.available_at, i.epoch AS lease_epoch,")
    complete = edit(complete, "t.attempt + CASE WHEN i.snoozed THEN 1 ELSE 0 END AS attempt, t.lease_owner,",
                    "t.attempt + 1 AS attempt, i.owner AS lease_owner,")
else:
    sys.exit(f"variant.py: unknown variant {variant}")

with open(os.path.join(sql, "task_claim.sql"), "w") as f:
    f.write(claim)
with open(os.path.join(sql, "task_complete_many.sql"), "w") as f:
    f.write(complete)
