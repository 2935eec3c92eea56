-- The next agent start number (the suffix that makes an agent id unique to one start). No
-- parameters.
UPDATE agent_start_seq SET value = value + 1 WHERE name = 'agents' RETURNING value
