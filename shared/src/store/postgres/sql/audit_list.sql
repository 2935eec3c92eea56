SELECT id, at, actor, role, action, target, params, result, detail, peer, count FROM audit_log
WHERE id < coalesce($1::bigint, 9223372036854775807)
  AND ($3::text IS NULL OR actor = $3)
  AND ($4::text IS NULL OR action = $4)
  AND ($5::text IS NULL OR result = $5)
  AND ($6::text IS NULL OR strpos(lower(target), lower($6)) > 0)
  AND ($7::timestamptz IS NULL OR at >= $7)
  AND ($8::timestamptz IS NULL OR at < $8)
ORDER BY id DESC
LIMIT $2
