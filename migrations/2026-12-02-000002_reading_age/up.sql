-- Per required reading, when its newest accepted observation was received,
-- moved onto the database's clock by the age the worker measured at the
-- heartbeat: {"pressure": "2026-12-02T01:02:03.5+00:00", "flow": null}.
-- `radar status` shows the ages on the database's clock.
ALTER TABLE radar_operational_status ADD COLUMN reading_seen_at jsonb;
