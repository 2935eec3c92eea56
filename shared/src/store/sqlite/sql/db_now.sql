-- SQLite's clock as a stored time: microseconds since the epoch, at millisecond precision.
-- No parameters. Read as the first statement of every store transaction.
SELECT (CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000) AS now
