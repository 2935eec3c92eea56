SELECT now() AS now
