INSERT INTO audit_log (actor, role, action, target, params, result, detail, peer, count)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)
