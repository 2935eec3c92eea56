-- Begins a write transaction: takes SQLite's single write lock before the first read, so the
-- transaction decides from rows no other writer can change under it. No parameters.
BEGIN IMMEDIATE
