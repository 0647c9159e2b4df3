// StoreError: every way a knife-store call can fail, each message saying what
// happened and what the user (or the calling code) can do about it.

use knife_protocol::{EventId, ProjectId};
use std::path::PathBuf;

/// Errors of the event store.
///
/// A failed write never leaves part of its batch behind: the transaction is rolled
/// back and nothing is published to the live feed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened or created at `path` (data directory not
    /// creatable, file not writable, not a SQLite file, WAL unsupported, ...).
    #[error("cannot open the knife database at {}: {message}", path.display())]
    Open {
        /// The SQLite file (or the data directory that could not be created).
        path: PathBuf,
        /// What failed and what to do, e.g. "cannot create the data directory /x:
        /// permission denied; choose a writable --data-dir".
        message: String,
    },
    /// The file's schema was written by a newer knife (`PRAGMA user_version` above
    /// the newest embedded migration).
    #[error(
        "the knife database schema is version {found}, newer than this knife build supports \
         ({supported}); upgrade knife or point --data-dir at another directory"
    )]
    SchemaTooNew {
        /// `PRAGMA user_version` found in the file.
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
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
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
    /// already has (one project per folder, migration 0002); the whole batch was
    /// rolled back.
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
    /// A SQLite error (I/O, lock timeout after 5 s, full disk, corrupt file, ...).
    /// For writes the transaction was rolled back.
    #[error(
        "SQLite error: {0}; if the database is busy, another process is writing to the same \
         --data-dir (only one knife server may use it); otherwise check disk space and the \
         file's permissions"
    )]
    Sqlite(#[from] rusqlite::Error),
    /// A stored event or entity could not be (de)serialized as JSON.
    #[error(
        "cannot encode or decode stored JSON: {0}; the database may have been written by a \
         different knife version — upgrade knife, or run `knife db rebuild` if only the \
         projections are affected"
    )]
    Serde(#[from] serde_json::Error),
    /// The writer thread has stopped (it panicked, or the store is being dropped), so
    /// the write was not attempted or its outcome is unknown.
    #[error(
        "the knife store's writer thread has stopped, so the write's outcome is unknown; \
         restart knife (the event log on disk is consistent)"
    )]
    WriterGone,
    /// A blocking read task failed (panicked or was cancelled at runtime shutdown).
    #[error("a knife store read failed: {0}; retry, or restart knife if it keeps failing")]
    ReadTask(String),
}
