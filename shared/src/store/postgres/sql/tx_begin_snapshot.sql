-- Begins a read-only transaction whose every statement reads one snapshot. No parameters.
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY
