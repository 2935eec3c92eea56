INSERT INTO audit_log (actor, role, action, target, params, result, detail)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)
