-- Issue 19: an audit row names the connection the call came from (`peer`, e.g.
-- `uid:1000(alice) pid:4242` or `tcp:10.0.0.7:50412`) and how many calls it stands for
-- (`count`): refused calls of one peer are folded into one `denied` row per window, so a peer
-- hammering the agent cannot flood the log. Older rows have no peer and stand for one call.
ALTER TABLE audit_log ADD COLUMN peer TEXT NULL
    CONSTRAINT audit_log_peer_size CHECK (peer IS NULL OR length(CAST(peer AS BLOB)) BETWEEN 1 AND 256);
ALTER TABLE audit_log ADD COLUMN count INTEGER NOT NULL DEFAULT 1
    CONSTRAINT audit_log_count_positive CHECK (count >= 1);
