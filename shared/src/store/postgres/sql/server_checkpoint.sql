-- A checkpoint now (the bench, between loading a backlog and its timed phases): the dirty pages
-- of the load are written out, and the WAL it wrote no longer starts a checkpoint later.
-- Needs superuser or pg_checkpoint.
CHECKPOINT
