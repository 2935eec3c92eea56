SELECT id, at, actor, role, action, target, params, result, detail FROM audit_log
WHERE id < coalesce($1::bigint, 9223372036854775807)
ORDER BY id DESC
LIMIT $2
