-- Schedules inherit max attempts (issue 24).
--
-- A schedule's `max_attempts` may now be NULL: each task it fires then takes its type's policy
-- value, else the global row's, else 25, resolved when the task is fired (the fired task goes
-- through the ordinary enqueue, task_enqueue.sql), so a later `policy set` applies to later
-- firings. A schedule with its own value keeps giving it to every task; replacing a schedule
-- without one makes it inherit. The range check holds for every NULL.
--
-- Rows stored before with 25 — the default every schedule added without a max attempts got —
-- inherit from now on: a deploy script that runs the same `leasehold schedules add` again finds
-- the same definition (not a different one, which is refused without --replace), and with no
-- policy setting max attempts the fired tasks still get 25. Other values are kept.
--
-- Upgrading: dropping NOT NULL and a default rewrites nothing; the UPDATE touches the
-- schedules at 25 (one row per schedule).
ALTER TABLE schedules
    ALTER COLUMN max_attempts DROP NOT NULL,
    ALTER COLUMN max_attempts DROP DEFAULT;
UPDATE schedules SET max_attempts = NULL WHERE max_attempts = 25;
