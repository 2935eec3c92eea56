-- Each agent's own liveness deadline (issue 18): database time until which the agent promises
-- to be alive without writing again, `now() + its lease TTL + grace`, set at registration and
-- pushed forward by every beat of its heartbeat connection (the one its lease renewals use, so
-- a busy main pool cannot make it look dead). The leader's unserved-type check trusts this
-- deadline instead of judging every agent by the leader's own timings. NULL: a row written by
-- an agent from before this column (judged by its registry heartbeat, as before).
ALTER TABLE agents ADD COLUMN alive_until timestamptz;
