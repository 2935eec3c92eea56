-- Schedules inherit max attempts (issue 24).
--
-- A schedule's `max_attempts` may now be NULL: each task it fires then takes its type's policy
-- value, else the global row's, else 25, resolved when the task is fired (the fired task goes
-- through the ordinary enqueue, task_enqueue.sql), so a later `policy set` applies to later
-- firings. A schedule with its own value keeps giving it to every task. Rows stored before
-- keep their value (25 when none was given then); replacing a schedule without one makes it
-- inherit. The range check holds for every NULL.
--
-- Upgrading: instant (dropping NOT NULL and a default rewrites nothing).
ALTER TABLE schedules
    ALTER COLUMN max_attempts DROP NOT NULL,
    ALTER COLUMN max_attempts DROP DEFAULT;
