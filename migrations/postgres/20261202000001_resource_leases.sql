-- Named resource leases (issue 8, DESIGN §4 "Resource leases"): locks and the shards of shard
-- groups, leased like tasks (owner, fencing token, database-clock lease_until), with the
-- ShedLock bounds, the members that share each group, and one history row per holding.
CREATE TABLE shard_groups (
    name        text        PRIMARY KEY,
    shard_count integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT shard_groups_name_size CHECK (octet_length(name) BETWEEN 1 AND 64),
    CONSTRAINT shard_groups_count CHECK (shard_count BETWEEN 1 AND 4096)
);

-- One row per lock (created on first acquire) and per shard (created with its group, named
-- `<group>#<shard>`). `token` grows with every new holding and is never reset.
CREATE TABLE resource_leases (
    name                text        PRIMARY KEY,
    group_name          text        REFERENCES shard_groups (name) ON DELETE CASCADE,
    shard               integer,
    owner               text,
    token               bigint      NOT NULL DEFAULT 0,
    lease_until         timestamptz,
    heartbeat_at        timestamptz,
    acquired_at         timestamptz,
    lock_at_least_until timestamptz,
    lock_at_most_until  timestamptz,
    released_at         timestamptz,
    CONSTRAINT resource_leases_shard CHECK ((group_name IS NULL) = (shard IS NULL)),
    CONSTRAINT resource_leases_held CHECK (owner IS NOT NULL OR lease_until IS NULL),
    CONSTRAINT resource_leases_name_size CHECK (octet_length(name) BETWEEN 1 AND 128),
    CONSTRAINT resource_leases_owner_size CHECK (octet_length(owner) <= 256)
);
CREATE UNIQUE INDEX resource_leases_group_shard ON resource_leases (group_name, shard)
    WHERE group_name IS NOT NULL;
CREATE INDEX resource_leases_owner ON resource_leases (owner) WHERE owner IS NOT NULL;

-- The agents that joined a group; a member counts until lease_until + grace.
CREATE TABLE shard_members (
    group_name   text        NOT NULL REFERENCES shard_groups (name) ON DELETE CASCADE,
    member       text        NOT NULL,
    joined_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    lease_until  timestamptz NOT NULL,
    PRIMARY KEY (group_name, member)
);
CREATE INDEX shard_members_member ON shard_members (member);

-- One row per holding: who took which lease with which token, when (moves in the last hour,
-- and the ledger of ownership). Pruned by the leader after a day.
CREATE TABLE resource_lease_history (
    id          bigserial   PRIMARY KEY,
    name        text        NOT NULL,
    group_name  text,
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX resource_lease_history_name ON resource_lease_history (name, token);
CREATE INDEX resource_lease_history_group ON resource_lease_history (group_name, acquired_at)
    WHERE group_name IS NOT NULL;
CREATE INDEX resource_lease_history_at ON resource_lease_history (acquired_at);
