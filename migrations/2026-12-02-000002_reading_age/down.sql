ALTER TABLE radar_operational_status DROP COLUMN reading_seen_at;
