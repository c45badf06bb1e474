DROP TABLE radar_operational_status;
DROP TABLE radar_evidence;
DROP TABLE radar_alarms;
DROP TABLE radar_runtime_checkpoints;
DROP TABLE services;
