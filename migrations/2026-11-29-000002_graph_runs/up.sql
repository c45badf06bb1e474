-- Graphs, their published revisions and the runs activated from them.

CREATE TABLE graphs (
    id uuid PRIMARY KEY,
    name text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A published revision never changes: runs and their snapshots are bound to
-- what it computed. Editing means publishing a new revision.
CREATE TABLE graph_revisions (
    graph_id uuid NOT NULL REFERENCES graphs (id),
    revision integer NOT NULL CHECK (revision >= 1),
    -- The definition as published, layout included.
    definition jsonb NOT NULL,
    -- Hex SHA-256 of the executable semantics (layout excluded).
    semantics_hash text NOT NULL CHECK (semantics_hash ~ '^[0-9a-f]{64}$'),
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (graph_id, revision)
);

CREATE FUNCTION radar_refuse_revision_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'published graph revisions are immutable; publish a new revision instead'
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER graph_revisions_immutable
    BEFORE UPDATE OR DELETE ON graph_revisions
    FOR EACH ROW EXECUTE FUNCTION radar_refuse_revision_change();

CREATE TRIGGER graph_revisions_not_truncated
    BEFORE TRUNCATE ON graph_revisions
    FOR EACH STATEMENT EXECUTE FUNCTION radar_refuse_revision_change();

-- One row per activation. Every run has its own monitor (service), so a
-- re-activated revision starts with a fresh calibration. `generation`
-- counts activations of a graph; a terminal generation (failed, stopped)
-- is never admitted again.
CREATE TABLE graph_runs (
    id uuid PRIMARY KEY,
    service_id uuid NOT NULL UNIQUE REFERENCES services (id) ON DELETE CASCADE,
    graph_id uuid NOT NULL REFERENCES graphs (id),
    revision integer NOT NULL,
    generation bigint NOT NULL CHECK (generation >= 1),
    -- What operators asked for; workers check it when they admit the run.
    lifecycle_intent text NOT NULL DEFAULT 'running'
        CHECK (lifecycle_intent IN ('running', 'stopping', 'stopped')),
    -- What the run did.
    status text NOT NULL DEFAULT 'starting'
        CHECK (status IN ('starting', 'running', 'failed', 'stopped')),
    failed_node text,
    diagnostics jsonb,
    -- The graph launch contract the run was activated under.
    launch_contract integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    FOREIGN KEY (graph_id, revision) REFERENCES graph_revisions (graph_id, revision),
    UNIQUE (graph_id, generation),
    CHECK ((status = 'failed') = (failed_node IS NOT NULL))
);

CREATE INDEX graph_runs_by_graph ON graph_runs (graph_id, created_at);
