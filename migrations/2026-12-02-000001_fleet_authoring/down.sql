DROP TABLE radar_workers;
DROP TABLE radar_fleet_settings;
