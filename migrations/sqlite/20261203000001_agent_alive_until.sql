-- Each agent's own liveness deadline (issue 18), SQLite: the column of the PostgreSQL
-- migration of the same name, in this schema's terms (INTEGER microseconds since the Unix
-- epoch from SQLite's clock). Set at registration to now + the agent's lease TTL + grace and
-- pushed forward by every beat of its heartbeat connection; NULL for rows written by agents
-- from before it (judged by their registry heartbeat, as before).
ALTER TABLE agents ADD COLUMN alive_until INTEGER;
