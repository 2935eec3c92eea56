SELECT t.*, now() AS db_now FROM tasks t WHERE t.id = $1
