-- One audit row: ?1 at, ?2 actor, ?3 role, ?4 action, ?5 target, ?6 params (JSON text),
-- ?7 result, ?8 detail, ?9 peer, ?10 the number of calls it stands for.
INSERT INTO audit_log (at, actor, role, action, target, params, result, detail, peer, count)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
