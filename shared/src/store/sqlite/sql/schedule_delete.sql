-- Deletes one schedule (?1); its tasks stay.
DELETE FROM schedules WHERE name = ?1
