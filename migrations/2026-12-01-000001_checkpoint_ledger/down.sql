DROP TABLE radar_checkpoint_ledger;
