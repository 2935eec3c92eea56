-- Whether the settings sent as the startup `options` parameter are in effect (a pooler told to
-- ignore the parameter drops them): plan_cache_mode, which the store sends as
-- force_generic_plan. Run with the simple protocol. No parameters.
SELECT current_setting('plan_cache_mode')
