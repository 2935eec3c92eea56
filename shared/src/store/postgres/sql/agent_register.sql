-- Register an agent process: its id is the name plus a suffix unique to this start (so it
-- cannot hold the leader row yet). Its liveness deadline starts $8 seconds from now (its own
-- lease TTL + grace); its heartbeat connection pushes it on (lease_renew_many).
INSERT INTO agents (id, name, host, pid, grpc_address, version, task_types, local_concurrency,
                    alive_until)
VALUES ($1 || '#' || nextval('agent_start_seq'), $1, $2, $3, $4, $5, $6, $7,
        now() + make_interval(secs => $8))
RETURNING *, now() AS now, false AS leader
