-- Whether the startup `options` parameter took effect (a pooler told to ignore it drops it): the
-- value of leasehold.startup_check, a placeholder of the store's own that the connection sent
-- there, or NULL. Run with the simple protocol. No parameters.
SELECT current_setting('leasehold.startup_check', true)
