-- The file's change counter: it moves whenever another connection commits (the wake-up of SQLite,
-- which has no NOTIFY).
PRAGMA data_version
