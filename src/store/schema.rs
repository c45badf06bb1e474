//! Diesel table definitions, matching `migrations/`.

diesel::table! {
    services (id) {
        id -> Uuid,
        name -> Text,
        description -> Nullable<Text>,
        config -> Jsonb,
        config_fingerprint -> Bytea,
        created_at -> Timestamptz,
        retired_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    radar_runtime_checkpoints (service_id) {
        service_id -> Uuid,
        envelope -> Bytea,
        format_version -> Int4,
        config_fingerprint -> Bytea,
        runtime_versions -> Text,
        processed_count -> Int8,
        observation_history_len -> Int4,
        saved_at -> Timestamptz,
        payload_sha256 -> Bytea,
        key_id -> Text,
        signature -> Bytea,
        payload -> Bytea,
        writer_id -> Text,
        committed_at -> Timestamptz,
    }
}

diesel::table! {
    radar_alarms (service_id, opened_at) {
        service_id -> Uuid,
        alarm_seq -> Int8,
        opened_at -> Timestamptz,
        closed_at -> Nullable<Timestamptz>,
        peak_score -> Float8,
        writer_signature -> Bytea,
        committed_at -> Timestamptz,
    }
}

diesel::table! {
    radar_evidence (service_id, frame_ts) {
        service_id -> Uuid,
        frame_ts -> Timestamptz,
        frame_seq -> Int8,
        alarm_seq -> Nullable<Int8>,
        score -> Float8,
        threshold -> Float8,
        p_value -> Float8,
        contributions -> Jsonb,
        writer_signature -> Bytea,
        committed_at -> Timestamptz,
    }
}

diesel::table! {
    radar_operational_status (service_id) {
        service_id -> Uuid,
        worker_id -> Text,
        state -> Text,
        phase -> Nullable<Text>,
        connected -> Bool,
        processed_count -> Int8,
        last_checkpoint_at -> Nullable<Timestamptz>,
        fencing_token -> Nullable<Text>,
        ownership -> Text,
        recovery -> Nullable<Jsonb>,
        coverage -> Nullable<Jsonb>,
        last_error -> Nullable<Text>,
        heartbeat_at -> Timestamptz,
        reading_seen_at -> Nullable<Jsonb>,
    }
}

diesel::table! {
    radar_checkpoint_ledger (service_id) {
        service_id -> Uuid,
        sequence -> Int8,
        signature -> Bytea,
        committed_at -> Timestamptz,
    }
}

diesel::joinable!(radar_runtime_checkpoints -> services (service_id));
diesel::joinable!(radar_checkpoint_ledger -> services (service_id));
diesel::joinable!(radar_alarms -> services (service_id));
diesel::joinable!(radar_evidence -> services (service_id));
diesel::joinable!(radar_operational_status -> services (service_id));

diesel::allow_tables_to_appear_in_same_query!(
    services,
    radar_runtime_checkpoints,
    radar_checkpoint_ledger,
    radar_alarms,
    radar_evidence,
    radar_operational_status,
);

diesel::table! {
    graphs (id) {
        id -> Uuid,
        name -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    graph_revisions (graph_id, revision) {
        graph_id -> Uuid,
        revision -> Int4,
        definition -> Jsonb,
        semantics_hash -> Text,
        published_at -> Timestamptz,
    }
}

diesel::table! {
    graph_runs (id) {
        id -> Uuid,
        service_id -> Uuid,
        graph_id -> Uuid,
        revision -> Int4,
        generation -> Int8,
        lifecycle_intent -> Text,
        status -> Text,
        failed_node -> Nullable<Text>,
        diagnostics -> Nullable<Jsonb>,
        launch_contract -> Int4,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        finished_at -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(graph_revisions -> graphs (graph_id));
diesel::joinable!(graph_runs -> graphs (graph_id));
diesel::joinable!(graph_runs -> services (service_id));

diesel::allow_tables_to_appear_in_same_query!(graphs, graph_revisions, graph_runs);
diesel::allow_tables_to_appear_in_same_query!(graphs, services);
diesel::allow_tables_to_appear_in_same_query!(graph_revisions, services);
diesel::allow_tables_to_appear_in_same_query!(graph_runs, services);
diesel::allow_tables_to_appear_in_same_query!(graph_runs, radar_runtime_checkpoints);
diesel::allow_tables_to_appear_in_same_query!(graph_runs, radar_operational_status);
