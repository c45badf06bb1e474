use thiserror::Error;
use uuid::Uuid;

/// What went wrong talking to PostgreSQL, in terms an operator can act on.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("cannot connect to PostgreSQL: {0}; check DATABASE_URL and that the server is up")]
    Connect(String),
    #[error("PostgreSQL query failed: {0}")]
    Query(#[from] diesel::result::Error),
    #[error("the database connection pool failed: {0}")]
    Pool(String),
    #[error(
        "the database was migrated by a newer radar (unknown migrations: {}); \
         run a radar binary that knows them, or follow the reviewed database restore procedure",
        .unknown.join(", ")
    )]
    SchemaNewerThanBinary { unknown: Vec<String> },
    #[error(
        "the database schema is behind this binary (pending migrations: {}); run `radar migrate` first",
        .pending.join(", ")
    )]
    SchemaBehind { pending: Vec<String> },
    #[error("running migrations failed: {0}")]
    Migration(String),
    #[error(
        "a monitor named {0:?} already exists; choose another name or retire and delete the old one"
    )]
    NameTaken(String),
    #[error("no monitor with id {0}")]
    MonitorNotFound(Uuid),
    #[error("monitor {id} is already retired (since {retired_at})")]
    AlreadyRetired { id: Uuid, retired_at: String },
    #[error("monitor {id} has an invalid stored config: {reason}")]
    InvalidStoredConfig { id: Uuid, reason: String },
    /// The error of a statement several monitors' writes shared (a batch
    /// of heartbeats), as its message.
    #[error("{0}")]
    Batched(String),
    #[error("the database did not answer within {seconds} s")]
    Timeout { seconds: u64 },
}
