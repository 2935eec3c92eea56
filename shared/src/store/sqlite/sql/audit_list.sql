-- A page of the audit log, newest first: ?1 ids below, ?2 page size, ?3 actor, ?4 action,
-- ?5 result, ?6 text in the target (case-insensitive for ASCII), ?7 at or after, ?8 before
-- (NULL = any).
SELECT id, at, actor, role, action, target, params, result, detail, peer, count
FROM audit_log
WHERE id < coalesce(?1, 9223372036854775807)
  AND (?3 IS NULL OR actor = ?3)
  AND (?4 IS NULL OR action = ?4)
  AND (?5 IS NULL OR result = ?5)
  AND (?6 IS NULL OR instr(lower(target), lower(?6)) > 0)
  AND (?7 IS NULL OR at >= ?7)
  AND (?8 IS NULL OR at < ?8)
ORDER BY id DESC LIMIT ?2
