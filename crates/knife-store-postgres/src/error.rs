// The PostgreSQL backend's internal error (a driver or pool error, or a contract error)
// and its conversion to the backend-neutral `knife_store::StoreError`.

use knife_store::StoreError;

/// What PostgreSQL failures tell the user to do.
pub(crate) const PG_HINT: &str = "check that the PostgreSQL server is running and reachable \
     from this node and that the knife role may use the database; knife retries nothing on its \
     own here, so restart the node once the database is back";

/// Internal error of the PostgreSQL code, so `?` works on driver and pool calls (the
/// orphan rule forbids `From<tokio_postgres::Error> for StoreError` here). Converted to
/// [`StoreError`] before it leaves the crate.
#[derive(Debug)]
pub(crate) enum PgError {
    /// A driver error, reported as [`StoreError::Database`].
    Driver(tokio_postgres::Error),
    /// No connection from the pool (server down, pool closed, timeout).
    Pool(deadpool_postgres::PoolError),
    /// An error already in contract terms.
    Store(StoreError),
    /// A fold change needed a read inside a transaction sent in one round trip
    /// (crate::pipelined); that path then writes the group the usual way. Never leaves
    /// the crate in practice (a database error if it did).
    NeedsRead,
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError::Driver(e)
    }
}

impl From<deadpool_postgres::PoolError> for PgError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        PgError::Pool(e)
    }
}

impl From<StoreError> for PgError {
    fn from(e: StoreError) -> Self {
        PgError::Store(e)
    }
}

impl From<serde_json::Error> for PgError {
    fn from(e: serde_json::Error) -> Self {
        PgError::Store(StoreError::Serde(e))
    }
}

impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        match e {
            PgError::Driver(e) if e.code() == Some(&tokio_postgres::error::SqlState::DISK_FULL) => {
                StoreError::Full {
                    backend: "PostgreSQL",
                    source: Box::new(e),
                }
            }
            PgError::Driver(e) => database(Box::new(e)),
            PgError::Pool(e) => database(Box::new(e)),
            PgError::Store(e) => e,
            PgError::NeedsRead => database(
                "internal: a fold change needed a read inside a one-round-trip append".into(),
            ),
        }
    }
}

fn database(source: knife_store::BackendError) -> StoreError {
    StoreError::Database {
        backend: "PostgreSQL",
        hint: PG_HINT,
        source,
    }
}

/// `Result` of the crate's internals.
pub(crate) type PgResult<T> = Result<T, PgError>;
