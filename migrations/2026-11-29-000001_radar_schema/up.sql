-- The monitors. A retired monitor is never started again; deleting one
-- deletes its snapshot, alarms, evidence and status by cascade.
CREATE TABLE services (
    id uuid PRIMARY KEY,
    name text NOT NULL UNIQUE,
    description text,
    -- The validated monitor definition (readings, alignment, detector).
    config jsonb NOT NULL,
    -- SHA-256 of the parts of the config that decide the numbers.
    config_fingerprint bytea NOT NULL CHECK (length(config_fingerprint) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz
);

-- One signed recovery snapshot per monitor. `envelope` holds the canonical
-- bytes the signature covers (see src/snapshot/envelope.rs); the columns
-- after it are a readable copy of the same fields for SQL and operators, and
-- a loader refuses a row whose copy disagrees with the signed bytes.
-- `signature` is also the fencing token that every later checkpoint must
-- compare-and-swap.
CREATE TABLE radar_runtime_checkpoints (
    service_id uuid PRIMARY KEY REFERENCES services (id) ON DELETE CASCADE,
    envelope bytea NOT NULL,
    format_version integer NOT NULL,
    config_fingerprint bytea NOT NULL,
    runtime_versions text NOT NULL,
    processed_count bigint NOT NULL CHECK (processed_count >= 0),
    observation_history_len integer NOT NULL CHECK (observation_history_len >= 0),
    saved_at timestamptz NOT NULL,
    payload_sha256 bytea NOT NULL,
    key_id text NOT NULL,
    signature bytea NOT NULL CHECK (length(signature) = 32),
    payload bytea NOT NULL,
    -- Which worker instance committed this snapshot (not signed: diagnostics).
    writer_id text NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);

-- Alarms opened by a monitor's alarm rule. An alarm is identified by the
-- source time of the frame that opened it, like evidence: after a hard
-- crash the restored detector counts `alarm_seq` again from its snapshot, so
-- the counter alone could make a new alarm overwrite a committed one.
CREATE TABLE radar_alarms (
    service_id uuid NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    alarm_seq bigint NOT NULL,
    opened_at timestamptz NOT NULL,
    closed_at timestamptz,
    peak_score double precision NOT NULL,
    -- Fencing token of the writer that committed the row.
    writer_signature bytea NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service_id, opened_at)
);

-- One row per flagged frame; a frame is identified by its source time, so
-- the same frame can never be inserted twice.
CREATE TABLE radar_evidence (
    service_id uuid NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    frame_ts timestamptz NOT NULL,
    frame_seq bigint NOT NULL,
    alarm_seq bigint,
    score double precision NOT NULL,
    threshold double precision NOT NULL,
    p_value double precision NOT NULL,
    -- Each reading's share of the score, by reading name.
    contributions jsonb NOT NULL,
    writer_signature bytea NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service_id, frame_ts)
);

-- The health projection each worker writes for the monitors it runs.
CREATE TABLE radar_operational_status (
    service_id uuid PRIMARY KEY REFERENCES services (id) ON DELETE CASCADE,
    worker_id text NOT NULL,
    state text NOT NULL,
    phase text,
    connected boolean NOT NULL DEFAULT false,
    processed_count bigint NOT NULL DEFAULT 0,
    last_checkpoint_at timestamptz,
    -- Prefix of the signature the writer last loaded or committed.
    fencing_token text,
    ownership text NOT NULL DEFAULT 'unknown',
    recovery jsonb,
    coverage jsonb,
    last_error text,
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
