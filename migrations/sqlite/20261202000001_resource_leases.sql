-- Named resource leases (issue 8, DESIGN §4 "Resource leases"), SQLite: the tables,
-- constraints and indexes of the PostgreSQL migration of the same name, in this schema's
-- terms (times INTEGER microseconds since the Unix epoch from SQLite's clock, booleans 0/1).
-- Locks and the shards of shard groups are leased like tasks (owner, fencing token,
-- database-clock lease_until), with the ShedLock bounds, the members that share each group,
-- and one history row per holding.
CREATE TABLE shard_groups (
    name        TEXT    PRIMARY KEY
        CONSTRAINT shard_groups_name_size CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 64),
    shard_count INTEGER NOT NULL
        CONSTRAINT shard_groups_count CHECK (shard_count BETWEEN 1 AND 4096),
    created_at  INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
);

-- One row per lock (created on first acquire) and per shard (created with its group, named
-- `<group>#<shard>`). `token` grows with every new holding and is never reset.
CREATE TABLE resource_leases (
    name                TEXT    PRIMARY KEY
        CONSTRAINT resource_leases_name_size CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 128),
    group_name          TEXT    REFERENCES shard_groups (name) ON DELETE CASCADE,
    shard               INTEGER,
    owner               TEXT
        CONSTRAINT resource_leases_owner_size CHECK (owner IS NULL OR length(CAST(owner AS BLOB)) <= 256),
    token               INTEGER NOT NULL DEFAULT 0,
    lease_until         INTEGER,
    heartbeat_at        INTEGER,
    acquired_at         INTEGER,
    lock_at_least_until INTEGER,
    lock_at_most_until  INTEGER,
    released_at         INTEGER,
    CONSTRAINT resource_leases_shard CHECK ((group_name IS NULL) = (shard IS NULL)),
    CONSTRAINT resource_leases_held CHECK (owner IS NOT NULL OR lease_until IS NULL)
);
CREATE UNIQUE INDEX resource_leases_group_shard ON resource_leases (group_name, shard)
    WHERE group_name IS NOT NULL;
CREATE INDEX resource_leases_owner ON resource_leases (owner) WHERE owner IS NOT NULL;

-- The agents that joined a group; a member counts until lease_until + grace.
CREATE TABLE shard_members (
    group_name   TEXT    NOT NULL REFERENCES shard_groups (name) ON DELETE CASCADE,
    member       TEXT    NOT NULL,
    joined_at    INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    heartbeat_at INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
    lease_until  INTEGER NOT NULL,
    PRIMARY KEY (group_name, member)
) WITHOUT ROWID;
CREATE INDEX shard_members_member ON shard_members (member);

-- One row per holding: who took which lease with which token, when (moves in the last hour,
-- and the ledger of ownership). Pruned by the leader after a day.
CREATE TABLE resource_lease_history (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    group_name  TEXT,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL
        DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
);
CREATE UNIQUE INDEX resource_lease_history_name ON resource_lease_history (name, token);
CREATE INDEX resource_lease_history_group ON resource_lease_history (group_name, acquired_at)
    WHERE group_name IS NOT NULL;
CREATE INDEX resource_lease_history_at ON resource_lease_history (acquired_at);
