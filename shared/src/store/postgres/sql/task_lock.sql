-- Locks task $1 for an operator action, as a statement of its own before the action's
-- statement. Under READ COMMITTED the action's statement then starts from a snapshot that
-- includes whatever committed while it waited for the lock (a claim, a completion), so it
-- decides from the current row. Locking inside the action's own statement would let
-- PostgreSQL re-evaluate only the WHERE clause after the wait and build the new row from the
-- stale version it first read (a cancel racing a claim: 'queued' without a lease).
SELECT id FROM tasks WHERE id = $1 FOR UPDATE
