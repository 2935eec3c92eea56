-- Succeeded (and partially succeeded) tasks for the Tasks view's count; the rest is
-- task_count_finished.sql. Never tasks_live (done_on <> 'infinity' prunes it).
SELECT count(*) AS n FROM (
    SELECT 1 FROM tasks t
    WHERE t.done_on <> 'infinity' AND t.status IN ('succeeded', 'partially_succeeded')
