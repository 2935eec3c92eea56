-- Begins a store transaction: the statements rely on READ COMMITTED (each sees what committed
-- before it; row locks re-check the latest row version), so they say so. No parameters.
BEGIN ISOLATION LEVEL READ COMMITTED
