-- The newest checkpoint each monitor committed, written in the same
-- transaction as the snapshot row. A database writer without the key cannot
-- forge a snapshot, but it can write back an older, validly signed row of
-- the same monitor; a loader refuses a row whose signature is not the one
-- recorded here. Restoring a whole consistent backup (both tables) is the
-- operator's reviewed procedure and is not detected.
CREATE TABLE radar_checkpoint_ledger (
    service_id uuid PRIMARY KEY REFERENCES services (id) ON DELETE CASCADE,
    -- Commits of the monitor's snapshot so far, from 1.
    sequence bigint NOT NULL CHECK (sequence >= 1),
    signature bytea NOT NULL CHECK (length(signature) = 32),
    committed_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO radar_checkpoint_ledger (service_id, sequence, signature)
SELECT service_id, 1, signature FROM radar_runtime_checkpoints;
