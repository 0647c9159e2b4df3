// The SQLite backend's internal error (a rusqlite error or a contract error) and its
// conversion to the backend-neutral `knife_store::StoreError` at the API boundary.

use knife_store::StoreError;

/// What SQLite's failures tell the user to do.
pub(crate) const SQLITE_HINT: &str = "if the database is busy, another process is writing to \
     the same --data-dir (only one knife server may use it); otherwise check disk space and \
     the file's permissions";

/// Internal error of the SQLite code: lets `?` work on rusqlite calls (the orphan rule
/// forbids `From<rusqlite::Error> for StoreError` here). Converted to [`StoreError`]
/// before it leaves the crate.
#[derive(Debug)]
pub(crate) enum DbError {
    /// A rusqlite error, reported as [`StoreError::Database`].
    Sqlite(rusqlite::Error),
    /// An error already in contract terms.
    Store(StoreError),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sqlite(e)
    }
}

impl From<StoreError> for DbError {
    fn from(e: StoreError) -> Self {
        DbError::Store(e)
    }
}

impl From<serde_json::Error> for DbError {
    fn from(e: serde_json::Error) -> Self {
        DbError::Store(StoreError::Serde(e))
    }
}

impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Sqlite(e) => sqlite_error(e),
            DbError::Store(e) => e,
        }
    }
}

/// A rusqlite error as [`StoreError::Full`] when SQLite says the disk (or the
/// `max_page_count` cap) is full, else as [`StoreError::Database`].
pub(crate) fn sqlite_error(e: rusqlite::Error) -> StoreError {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
        return StoreError::Full {
            backend: "SQLite",
            source: Box::new(e),
        };
    }
    StoreError::Database {
        backend: "SQLite",
        hint: SQLITE_HINT,
        source: Box::new(e),
    }
}
