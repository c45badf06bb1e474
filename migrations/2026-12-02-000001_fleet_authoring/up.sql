-- Fleet-wide settings: one row. Graph authoring (publishing revisions and
-- activating runs) starts off, also on a database that ran graphs before
-- this migration: it is turned on with `radar graph authoring enable`, which
-- refuses while a live worker does not support graph runs.
CREATE TABLE radar_fleet_settings (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    graph_authoring_enabled boolean NOT NULL DEFAULT false,
    -- Who changed it last (the CLI's user and host, diagnostics only) and when.
    changed_by text,
    changed_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO radar_fleet_settings (singleton) VALUES (true);

-- Every worker process registers here and refreshes its heartbeat, also
-- while it runs no monitor, advertising what its binary supports.
-- `graph_launch_contract` is the graph launch contract the binary executes
-- (NULL: it runs no graph). A worker is live while it has not stopped and
-- its heartbeat is recent on the database's clock.
CREATE TABLE radar_workers (
    worker_id text PRIMARY KEY,
    graph_launch_contract integer,
    -- The binary's version (diagnostics).
    binary_version text NOT NULL,
    state text NOT NULL CHECK (state IN ('running', 'stopped')),
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
