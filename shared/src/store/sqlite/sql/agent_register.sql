-- Register an agent process: ?1 id (name plus its start number), ?2 name, ?3 host, ?4 pid,
-- ?5 gRPC address, ?6 version, ?7 task types (JSON array), ?8 local concurrency, ?9 now,
-- ?10 its liveness deadline (its own lease TTL + grace from now).
INSERT INTO agents (id, name, host, pid, grpc_address, version, task_types,
                    local_concurrency, started_at, heartbeat_at, alive_until)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10)
