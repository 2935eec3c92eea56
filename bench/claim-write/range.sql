-- bench/claim-write.sh: how the range variants (DIAGNOSES, never shipped) find a claim's rows.
-- A shared cursor (one row, created by the script in each bench database) hands out id ranges
-- of $3 tasks: no walk of tasks_claim_idx, no FOR UPDATE SKIP LOCKED, no policy CTEs. Correct
-- only for the bench: one type, no limits, no priorities or delays, ids claimed in order.
-- The script appends the claim's end: today's UPDATE of the rows in `chosen` (range+write),
-- the same without `status` (range+HOT), or claim-write/no_write_end.sql (range only).
WITH cur AS (
    UPDATE claim_write_cursor SET pos = pos + $3::bigint RETURNING pos - $3::bigint AS lo, pos AS hi
),
chosen AS (
    SELECT t.* FROM tasks t
    WHERE t.done_on = 'infinity' AND t.id > (SELECT lo FROM cur) AND t.id <= (SELECT hi FROM cur)
      AND t.status = 'queued'
      AND $1::text IS NOT NULL AND $2::text[] IS NOT NULL AND $5::text[] IS NOT NULL
)
