-- Register an agent process: its id is the name plus a suffix unique to this start (so it
-- cannot hold the leader row yet).
INSERT INTO agents (id, name, host, pid, grpc_address, version, task_types, local_concurrency)
VALUES ($1 || '#' || nextval('agent_start_seq'), $1, $2, $3, $4, $5, $6, $7)
RETURNING *, now() AS now, false AS leader
