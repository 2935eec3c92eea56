-- Owner ?1 becomes or stays leader: term ?2, lease until ?3, heartbeat at now ?4; ?5 true keeps
-- elected_at (the same owner's term goes on), false starts it now.
UPDATE leader SET owner = ?1, term = ?2, lease_until = ?3, heartbeat_at = ?4,
       elected_at = CASE WHEN ?5 THEN elected_at ELSE ?4 END
WHERE name = 'default'
