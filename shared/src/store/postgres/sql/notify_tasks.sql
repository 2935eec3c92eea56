SELECT pg_notify('leasehold_tasks', '')
