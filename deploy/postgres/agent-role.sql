-- The PostgreSQL role agents connect as: `leasehold_agent` (issue 19, DESIGN §10).
--
-- Run this as an admin (the owner of the Leasehold tables, or a superuser) in the Leasehold
-- database, AFTER `leasehold-agent migrate` (run by that admin too): migrations create and alter
-- tables, which this role may not. Run it again after each upgrade's migrations, so tables a new
-- version adds get their grants. It is idempotent.
--
--   psql "postgres://admin@db/leasehold" -v ON_ERROR_STOP=1 -f deploy/postgres/agent-role.sql
--   psql "postgres://admin@db/leasehold" -c "\password leasehold_agent"
--
-- then start agents with `--database-url postgres://leasehold_agent@db/leasehold`.
--
-- What it grants: exactly the statements the agent's store runs (shared/src/store/postgres),
-- table by table. What it keeps from the agent: the audit log is INSERT-only (and SELECT, for
-- `leasehold audit ls`): an agent, or whoever steals its credentials, can add rows but can
-- neither UPDATE nor DELETE nor TRUNCATE the record of what operators did. Nothing in the agent
-- updates or deletes audit_log (there is no audit retention in the agent); prune old rows, if
-- you must, with an admin job, e.g.
--   DELETE FROM audit_log WHERE at < now() - interval '400 days';
-- LISTEN/NOTIFY (how enqueues wake agents) needs no grant.
-- Not granted: CREATE on the schema, TRUNCATE anywhere, ownership of anything.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'leasehold_agent') THEN
        -- LOGIN without a password: set one (\password) unless the server authenticates the
        -- role another way (peer, cert, trust on a private socket).
        CREATE ROLE leasehold_agent LOGIN;
    END IF;
END
$$;

-- Start from nothing, so a re-run after a change of this file takes rights away too.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM leasehold_agent;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM leasehold_agent;

GRANT USAGE ON SCHEMA public TO leasehold_agent;
-- The agent checks which migrations are applied; it never writes them.
GRANT SELECT ON _sqlx_migrations TO leasehold_agent;

-- Tasks: enqueue, claim, renew, complete, cancel, requeue, recovery, dead-lettering (UPDATE),
-- purge of finished tasks past retention (DELETE); SELECT … FOR UPDATE needs UPDATE too.
GRANT SELECT, INSERT, UPDATE, DELETE ON tasks TO leasehold_agent;
-- tasks is partitioned by the day a task finished; statements through tasks need no grant on
-- its partitions, but retention deletes row by row from the three that are not one day's.
GRANT SELECT, UPDATE, DELETE ON tasks_live, tasks_done_kept, tasks_done_default TO leasehold_agent;
-- The leader makes the coming days' partitions and drops those past retention through these
-- two functions, which run with the tables' owner's rights (the role may not create or drop
-- tables itself).
GRANT EXECUTE ON FUNCTION leasehold_tasks_done_partition(date) TO leasehold_agent;
GRANT EXECUTE ON FUNCTION leasehold_tasks_done_drop(date, text[], double precision) TO leasehold_agent;
-- Attempts: the rows of attempts a task outlived (a retried failure, a release, an expired
-- lease), written as they end; deleted with their task by the trigger tasks_delete_attempts
-- (which runs with the rights of the deleting role). `task_attempts` is the view over them and
-- each finished task's own final attempt.
GRANT SELECT, INSERT, DELETE ON task_attempt_rows TO leasehold_agent;
GRANT SELECT ON task_attempts TO leasehold_agent;
-- Policies: read at each claim; `concurrency set`, `pause`, `resume` upsert them.
GRANT SELECT, INSERT, UPDATE ON policies TO leasehold_agent;
-- Rate limits: claims read each limited scope's ledger, add their starts and prune what left
-- the window.
GRANT SELECT, INSERT, DELETE ON rate_limit_starts TO leasehold_agent;
-- The agent registry: register, heartbeat, mark stopped.
GRANT SELECT, INSERT, UPDATE ON agents TO leasehold_agent;
-- The leader lease: elect, renew, resign (fenced by term).
GRANT SELECT, INSERT, UPDATE ON leader TO leasehold_agent;
-- Schedules: declared at start, added, removed, enabled, fired.
GRANT SELECT, INSERT, UPDATE, DELETE ON schedules TO leasehold_agent;
-- Locks and shard leases: acquire, renew, release, force release.
GRANT SELECT, INSERT, UPDATE ON resource_leases TO leasehold_agent;
-- Their history: one row per holding, marked when released, pruned by the leader.
GRANT SELECT, INSERT, UPDATE, DELETE ON resource_lease_history TO leasehold_agent;
-- Shard groups: created (never changed; FOR UPDATE locks them, which needs UPDATE).
GRANT SELECT, INSERT, UPDATE ON shard_groups TO leasehold_agent;
-- Group memberships: join, renew, leave.
GRANT SELECT, INSERT, UPDATE, DELETE ON shard_members TO leasehold_agent;

-- Queue history: the leader's sampler writes each minute's counts and marks (upserts) and
-- deletes rows older than a day; GetHistory reads them.
GRANT SELECT, INSERT, UPDATE, DELETE ON queue_history, queue_history_minutes TO leasehold_agent;

-- The audit log: INSERT-only for agents (SELECT for `leasehold audit ls`). No UPDATE, no
-- DELETE, no TRUNCATE: the REVOKE above took anything else away.
GRANT SELECT, INSERT ON audit_log TO leasehold_agent;

-- Ids: the identity sequences of tasks, attempts, audit rows and history, and
-- agent_start_seq (per-start agent ids). USAGE allows nextval, never setval.
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO leasehold_agent;
