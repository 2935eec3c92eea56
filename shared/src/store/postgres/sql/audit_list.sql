SELECT id, at, actor, role, action, target, params, result, detail FROM audit_log
WHERE ($1::bigint IS NULL OR id < $1)
ORDER BY id DESC
LIMIT $2
