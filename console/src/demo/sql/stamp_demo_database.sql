-- Marks a new SQLite file as a `leasehold demo` database: application_id 0x4C48444D ("LHDM"),
-- read back from the file header by console/src/demo/database.rs before a demo replaces it.
PRAGMA application_id = 1279804493;
