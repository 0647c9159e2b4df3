// StoreError: every way a store call can fail, on any backend, each message saying
// what happened and what the user (or the calling code) can do about it.

use knife_protocol::{EventId, ProjectId, ThreadId, Timestamp};

/// A backend's own error (a SQLite or PostgreSQL error), kept as the `source` of a
/// [`StoreError`] without naming the driver's type.
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the event store, the same for every backend (SQLite, PostgreSQL).
///
/// A failed write never leaves part of its batch behind: the transaction is rolled
/// back and nothing is published to the live feed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened or created at `location` (data directory not
    /// creatable, file not writable, not a database, server unreachable, ...).
    #[error("cannot open the knife database at {location}: {message}")]
    Open {
        /// The SQLite file, or the database URL with its password hidden.
        location: String,
        /// What failed and what to do, e.g. "cannot create the data directory /x:
        /// permission denied; choose a writable --data-dir".
        message: String,
    },
    /// The database's schema was written by a newer knife (its schema version is above
    /// the newest embedded migration).
    #[error(
        "the knife database schema is version {found}, newer than this knife build supports \
         ({supported}); upgrade knife or point --data-dir at another directory"
    )]
    SchemaTooNew {
        /// Schema version found in the database.
        found: i64,
        /// Newest migration embedded in this build.
        supported: i64,
    },
    /// An embedded migration failed to apply; nothing of it was committed.
    #[error(
        "database migration {version} ({name}) failed: {source}; the database was left at the \
         previous schema version — check disk space and permissions, then restart knife"
    )]
    Migration {
        /// Number of the failing migration (`migrations/NNNN_name.sql`).
        version: i64,
        /// Name of the failing migration.
        name: &'static str,
        /// The backend's error.
        #[source]
        source: BackendError,
    },
    /// An event with this id is already in the log; the whole batch was rolled back.
    #[error(
        "event {event_id} is already in the event log, so the batch was not written; \
         every event needs a fresh EventId (EventId::new())"
    )]
    DuplicateEvent {
        /// The id that was appended twice.
        event_id: EventId,
    },
    /// A `project.created` / `project.updated` names a root folder that another project
    /// already has (one project per folder); the whole batch was rolled back.
    #[error(
        "the folder {root} is already project {project_id}, so the batch was not written; \
         use that project (GET /api/projects lists them)"
    )]
    ProjectRootTaken {
        /// The canonical root folder, as stored on the project.
        root: String,
        /// The project that has this root.
        project_id: ProjectId,
    },
    /// The disk (or the database's quota) is full, so the write was not committed; the
    /// transaction was rolled back and the event log is intact (SPEC.md SEC-07).
    /// Retryable: once space is freed the same write succeeds, and knife retries the
    /// write that ends a run until it commits.
    #[error(
        "the disk holding the knife database is full ({backend}: {source}), so nothing of this \
         write was committed; free space on the data directory's filesystem (or raise the \
         database's quota) and retry — knife keeps retrying the writes that end runs"
    )]
    Full {
        /// Which backend reported it (for the message only; never match on it).
        backend: &'static str,
        /// The driver's error.
        #[source]
        source: BackendError,
    },
    /// The database failed (I/O, lock timeout, corrupt file, lost
    /// connection, ...). For writes the transaction was rolled back. `backend` is
    /// `"SQLite"` or `"PostgreSQL"`; `hint` says what to do.
    #[error("{backend} error: {source}; {hint}")]
    Database {
        /// Which backend failed (for the message only; never match on it).
        backend: &'static str,
        /// What the user can do, e.g. "check disk space and the file's permissions".
        hint: &'static str,
        /// The driver's error.
        #[source]
        source: BackendError,
    },
    /// A stored event or entity could not be (de)serialized as JSON.
    #[error(
        "cannot encode or decode stored JSON: {0}; the database may have been written by a \
         different knife version — upgrade knife, or run `knife db rebuild` if only the \
         projections are affected"
    )]
    Serde(#[from] serde_json::Error),
    /// The store's writer has stopped (it panicked, or the store is being dropped), so
    /// the write was not attempted or its outcome is unknown.
    #[error(
        "the knife store's writer has stopped, so the write's outcome is unknown; \
         restart knife (the event log on disk is consistent)"
    )]
    WriterGone,
    /// Another node holds a live lease on the thread (SPEC SCALE-04): this node must not
    /// run its work now.
    #[error(
        "thread {thread_id} is being run by node {node} (its lease lasts until {expires_at} on \
         the database's clock); leave it to that node, or wait for the lease to expire"
    )]
    LeaseHeld {
        /// The leased thread.
        thread_id: ThreadId,
        /// The node holding it.
        node: String,
        /// When its lease expires unless renewed.
        expires_at: Timestamp,
    },
    /// The caller's lease on the thread moved on (another node took the thread over, or
    /// this node resumed it again): the write (or renewal) was refused and nothing of it
    /// was written (SPEC SCALE-04).
    #[error(
        "node {node} no longer holds the lease of thread {thread_id} (it held epoch {epoch}; \
         now: {current}), so the write was refused and nothing of it was written; stop \
         working on this thread and do not retry (its lease holder resumes it)"
    )]
    Fenced {
        /// The thread.
        thread_id: ThreadId,
        /// The node whose lease it was.
        node: String,
        /// The epoch the caller held.
        epoch: u64,
        /// Who holds it now, e.g. `node node-b at epoch 4`.
        current: String,
    },
    /// Another process heartbeats this node id (SPEC SCALE-05): two live processes
    /// must never share one, or each would take the other's leases for its own.
    #[error(
        "node id {node} is in use by a live knife process at {location} (its heartbeat lasts \
         until {expires_at} on the database's clock); stop that process, or give this one \
         another id with `[store] node_id` or `knife serve --node-id`"
    )]
    NodeIdLive {
        /// The node id.
        node: String,
        /// Where the other process runs (`<host>:<data directory>`).
        location: String,
        /// When its row expires unless heartbeated again.
        expires_at: Timestamp,
    },
    /// An imported event's sequence is not above the log's last one (SCALE-09): the
    /// target already holds events at or after it, or the batch is out of order.
    #[error(
        "cannot import the event with sequence {sequence}: the log already reaches sequence \
         {head}; copy into an empty database (or continue a copy from where it stopped)"
    )]
    ImportOrder {
        /// The imported event's sequence.
        sequence: u64,
        /// The highest sequence already in the log (or of the batch so far).
        head: u64,
    },
    /// A read task failed (panicked or was cancelled at runtime shutdown).
    #[error("a knife store read failed: {0}; retry, or restart knife if it keeps failing")]
    ReadTask(String),
}

impl StoreError {
    /// Whether the same call may succeed if retried later without changing it: a full
    /// disk ([`StoreError::Full`]) or a database failure ([`StoreError::Database`]: I/O,
    /// lock timeout, lost connection). Contract violations (duplicate event, taken
    /// root), schema and JSON errors are not. Used by the runtime to retry the writes
    /// that end runs (SPEC.md SEC-07).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Full { .. } | StoreError::Database { .. })
    }

    /// Whether this is a full disk ([`StoreError::Full`]).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::Full { .. })
    }
}
