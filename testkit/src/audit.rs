//! The write audit: triggers that record every insert, update and delete
//! of the snapshot, evidence and alarm tables, inside the audited
//! transaction (so a row exists exactly when the write committed), with the
//! writing session's `application_name` and transaction, the wall time, and
//! the token the write carried. The fencing tests and the chaos driver
//! order the writes of several workers after the fact with it.

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Bytea, Double, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

/// The audit table and its triggers. `tbl` is `checkpoint`, `evidence` or
/// `alarm`; `op` is `TG_OP`; `replaced` is the token an update overwrote.
const INSTALL: &[&str] = &[
    "CREATE TABLE test_write_audit (
        seq bigserial PRIMARY KEY,
        tbl text NOT NULL,
        op text NOT NULL,
        service_id uuid NOT NULL,
        app text NOT NULL,
        txid bigint NOT NULL,
        signature bytea NOT NULL,
        replaced bytea,
        writer_id text,
        processed_count bigint,
        saved_at timestamptz,
        frame_ts timestamptz,
        score double precision,
        at timestamptz NOT NULL DEFAULT clock_timestamp())",
    "CREATE FUNCTION test_audit_checkpoint() RETURNS trigger AS $$
     BEGIN
       IF TG_OP = 'DELETE' THEN
         INSERT INTO test_write_audit (tbl, op, service_id, app, txid, signature, writer_id, processed_count, saved_at)
         VALUES ('checkpoint', TG_OP, OLD.service_id, current_setting('application_name'),
                 txid_current(), OLD.signature, OLD.writer_id, OLD.processed_count, OLD.saved_at);
         RETURN OLD;
       END IF;
       INSERT INTO test_write_audit (tbl, op, service_id, app, txid, signature, replaced, writer_id, processed_count, saved_at)
       VALUES ('checkpoint', TG_OP, NEW.service_id, current_setting('application_name'), txid_current(),
               NEW.signature, CASE WHEN TG_OP = 'UPDATE' THEN OLD.signature END,
               NEW.writer_id, NEW.processed_count, NEW.saved_at);
       RETURN NEW;
     END $$ LANGUAGE plpgsql",
    "CREATE TRIGGER test_audit AFTER INSERT OR UPDATE OR DELETE ON radar_runtime_checkpoints
     FOR EACH ROW EXECUTE FUNCTION test_audit_checkpoint()",
    "CREATE TRIGGER test_audit AFTER INSERT OR UPDATE OR DELETE ON radar_evidence
     FOR EACH ROW EXECUTE FUNCTION test_audit_evidence()",
    "CREATE TRIGGER test_audit AFTER INSERT OR UPDATE OR DELETE ON radar_alarms
     FOR EACH ROW EXECUTE FUNCTION test_audit_alarm()",
];

/// The trigger function of a result table (`radar_evidence` as `evidence`,
/// `radar_alarms` as `alarm`): its time and score columns are named `ts`
/// and `score`.
fn result_trigger(tbl: &str, ts: &str, score: &str) -> String {
    format!(
        "CREATE FUNCTION test_audit_{tbl}() RETURNS trigger AS $$
     BEGIN
       IF TG_OP = 'DELETE' THEN
         INSERT INTO test_write_audit (tbl, op, service_id, app, txid, signature, frame_ts, score)
         VALUES ('{tbl}', TG_OP, OLD.service_id, current_setting('application_name'),
                 txid_current(), OLD.writer_signature, OLD.{ts}, OLD.{score});
         RETURN OLD;
       END IF;
       INSERT INTO test_write_audit (tbl, op, service_id, app, txid, signature, frame_ts, score)
       VALUES ('{tbl}', TG_OP, NEW.service_id, current_setting('application_name'),
               txid_current(), NEW.writer_signature, NEW.{ts}, NEW.{score});
       RETURN NEW;
     END $$ LANGUAGE plpgsql"
    )
}

/// Installs the audit in the connection's database.
pub async fn try_install(conn: &mut AsyncPgConnection) -> Result<()> {
    let results = [
        result_trigger("evidence", "frame_ts", "score"),
        result_trigger("alarm", "opened_at", "peak_score"),
    ];
    // INSTALL holds the table and the checkpoint function, then the triggers.
    let (table, triggers) = INSTALL.split_at(2);
    let statements = table
        .iter()
        .map(|s| s.to_string())
        .chain(results)
        .chain(triggers.iter().map(|s| s.to_string()));
    for statement in statements {
        diesel::sql_query(statement)
            .execute(conn)
            .await
            .context("installing the write audit")?;
    }
    Ok(())
}

/// [`try_install`] for a test: panics when it cannot.
pub async fn install_write_audit(conn: &mut AsyncPgConnection) {
    try_install(conn).await.unwrap_or_else(|e| panic!("{e:#}"));
}

/// One audited write, every column.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct Write {
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    #[diesel(sql_type = Text)]
    pub tbl: String,
    #[diesel(sql_type = Text)]
    pub op: String,
    #[diesel(sql_type = SqlUuid)]
    pub service_id: Uuid,
    /// The writing session's `application_name`.
    #[diesel(sql_type = Text)]
    pub app: String,
    #[diesel(sql_type = BigInt)]
    pub txid: i64,
    #[diesel(sql_type = Bytea)]
    pub signature: Vec<u8>,
    #[diesel(sql_type = Nullable<Bytea>)]
    pub replaced: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<Text>)]
    pub writer_id: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub processed_count: Option<i64>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub saved_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub frame_ts: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Double>)]
    pub score: Option<f64>,
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
}

/// Every audited write (deletes too), oldest first.
pub async fn try_writes(conn: &mut AsyncPgConnection) -> Result<Vec<Write>> {
    diesel::sql_query(
        "SELECT seq, tbl, op, service_id, app, txid, signature, replaced, writer_id, \
         processed_count, saved_at, frame_ts, score, at FROM test_write_audit ORDER BY seq",
    )
    .load(conn)
    .await
    .context("reading the write audit")
}

/// One audited insert or update, as the worker tests read it.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct AuditRow {
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    /// `checkpoint`, `evidence` or `alarm`.
    #[diesel(sql_type = Text)]
    pub tbl: String,
    #[diesel(sql_type = Bytea)]
    pub signature: Vec<u8>,
    #[diesel(sql_type = Nullable<Text>)]
    pub writer_id: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub processed_count: Option<i64>,
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
}

/// Every audited insert and update, oldest first (deletes left out).
pub async fn audit(conn: &mut AsyncPgConnection) -> Vec<AuditRow> {
    diesel::sql_query(
        "SELECT seq, tbl, signature, writer_id, processed_count, at FROM test_write_audit \
         WHERE op <> 'DELETE' ORDER BY seq",
    )
    .load(conn)
    .await
    .expect("read the write audit")
}
