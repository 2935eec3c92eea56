-- The pass's clock: the transaction's now (the time every count is judged by), and the id
-- sequence's last value read after it, with the clock read after that (the mark is stored for a
-- minute that began after `read_at`). pg_sequence_last_value needs USAGE on the sequence only.
SELECT now() AS now,
       coalesce(pg_sequence_last_value('tasks_id_seq'::regclass), 0) AS id_mark,
       clock_timestamp() AS read_at
