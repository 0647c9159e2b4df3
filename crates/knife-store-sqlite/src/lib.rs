// knife-store-sqlite: the default single-node backend of the knife store contract —
// one SQLite file, a single writer thread, a read-only pool, embedded migrations.

//! knife-store-sqlite: implements the `knife-store` contract on one SQLite file
//! (ARCHITECTURE.md "Storage").
//!
//! # Design
//!
//! * **One writer.** A dedicated OS thread owns the only read-write connection.
//!   Writes send it a job and await the reply; each job is one `BEGIN IMMEDIATE`
//!   transaction that appends the events (sequences from `INTEGER PRIMARY KEY
//!   AUTOINCREMENT`, so in commit order) and folds them into the projection tables
//!   with the same function `rebuild` uses. After COMMIT the writer publishes the
//!   stored events to the in-process live feed, in sequence order.
//! * **Many readers.** Queries run on a small pool of read-only connections on
//!   tokio's blocking pool; WAL lets them read while the writer writes.
//! * **Streams** are `knife_store::replay_then_live` over the live feed and the table.
//! * **Projections** hold the whole entity as JSON plus indexed columns and a
//!   `version` (1 on insert, +1 per upsert) used by compare-and-set writes (MGR-47).
//!
//! ```no_run
//! # async fn demo() -> Result<(), knife_store::StoreError> {
//! let store: knife_store::Store = knife_store_sqlite::open("/tmp/knife/knife.db").await?;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod claims;
mod cluster;
mod error;
mod fold;
mod import;
mod leases;
mod purge;
mod queries;
mod schema;
mod search_queue;
mod writer;

use error::DbError;
use futures::stream::BoxStream;
use knife_protocol::{
    DomainEvent, Project, ProjectId, ProviderSession, ProviderSessionId, ProviderThread,
    ProviderThreadId, Run, RunId, RuntimeRequest, RuntimeRequestId, StoredEvent, Thread, ThreadId,
    ThreadProjection, TurnItem, TurnItemId,
};
use knife_store::{
    EntityKind, EventFeed, EventLog, Maintenance, ProjectionReads, PurgeStats, RebuildStats,
    RowGuard, Store, StoreError, StreamFilter, StreamSource,
};
use queries::ReadPool;
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::broadcast;
use writer::Writer;

/// Tuning knobs of [`SqliteStore::open_with`]; `Default` is what `open` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Read-only connections in the read pool (default 4, at least 1).
    pub readers: usize,
    /// Capacity of the live feed, in events (default 4096). A stream that falls
    /// further behind recovers from the table; this only bounds memory, never
    /// correctness.
    pub live_capacity: usize,
    /// How long the writer waits with no write before it checkpoints the WAL into the
    /// database file and truncates it (default 2 s; SPEC.md SEC-07).
    pub idle_checkpoint: std::time::Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            readers: 4,
            live_capacity: 4096,
            idle_checkpoint: std::time::Duration::from_secs(2),
        }
    }
}

/// Opens (or creates) the SQLite store at `path` and wraps it in a [`Store`]: what the
/// composition root and tests call. See [`SqliteStore::open`].
pub async fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
    SqliteStore::open(path).await.map(Store::new)
}

/// [`open`] with explicit [`StoreOptions`].
pub async fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store, StoreError> {
    SqliteStore::open_with(path, options).await.map(Store::new)
}

/// One knife database in one SQLite file. Cheap to clone (an `Arc` inside),
/// `Send + Sync`; must be used from within a tokio runtime (reads use
/// `spawn_blocking`).
///
/// The writer thread and the connections close when the last clone (including the
/// clones held by live streams) is dropped.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    writer: Writer,
    readers: Arc<ReadPool>,
    live: broadcast::Sender<StoredEvent>,
}

impl SqliteStore {
    /// Opens or creates the SQLite file at `path` (creating its directory), sets WAL,
    /// `synchronous=NORMAL`, a 5 s busy timeout and foreign keys, applies the embedded
    /// migrations, opens the read pool and starts the writer thread.
    ///
    /// Errors: [`StoreError::Open`] naming the path and what to do (e.g. "cannot create
    /// the data directory /x: permission denied; choose a writable --data-dir"),
    /// [`StoreError::SchemaTooNew`], [`StoreError::Migration`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, StoreOptions::default()).await
    }

    /// [`SqliteStore::open`] with explicit [`StoreOptions`] (read pool size, live feed
    /// capacity).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: StoreOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_owned();
        let (conn, readers) = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || -> Result<(Connection, ReadPool), DbError> {
                let conn = schema::open_writer(&path)?;
                let readers = ReadPool::open(path, options.readers)?;
                Ok((conn, readers))
            })
            .await
            .map_err(|e| StoreError::ReadTask(e.to_string()))??
        };
        let (live, _) = broadcast::channel(options.live_capacity.max(1));
        let writer = Writer::spawn(conn, live.clone(), options.idle_checkpoint).map_err(|e| {
            StoreError::Open {
                location: path.display().to_string(),
                message: format!(
                    "cannot start the writer thread: {e}; the system is out of threads or memory"
                ),
            }
        })?;
        tracing::debug!(path = %path.display(), "knife store open");
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                writer,
                readers: Arc::new(readers),
                live,
            }),
        })
    }

    /// The SQLite file this store was opened on.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Caps the database file at `pages` pages (`PRAGMA max_page_count`; a page is
    /// `PRAGMA page_size` bytes, 4096 by default) for this connection, or lifts the cap
    /// with `None`. A write that would grow the file past the cap fails with
    /// [`StoreError::Full`] exactly like a full disk, so this both reserves disk for
    /// other data and lets tests fill the database without filling a filesystem
    /// (SPEC.md SEC-07). Returns the cap now in force, in pages.
    pub async fn set_max_page_count(&self, pages: Option<u64>) -> Result<u64, StoreError> {
        // SQLite's own upper limit (4294967294 pages) stands for "no cap".
        let pages = pages.unwrap_or(4_294_967_294);
        self.inner
            .writer
            .run(move |conn| {
                let now: i64 =
                    conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
                        row.get(0)
                    })?;
                Ok(u64::try_from(now).unwrap_or(0))
            })
            .await
    }

    // ---- internals ----

    async fn get<T>(&self, kind: EntityKind, id: &str) -> Result<Option<T>, StoreError>
    where
        T: serde::de::DeserializeOwned + Send + 'static,
    {
        let id = id.to_owned();
        self.read(move |c| queries::get_entity(c, kind.table(), &id))
            .await
    }

    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, DbError> + Send + 'static,
    {
        self.inner.readers.read(f).await
    }
}

#[async_trait::async_trait]
impl EventLog for SqliteStore {
    async fn write(&self, events: Vec<DomainEvent>) -> Result<Vec<StoredEvent>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        self.inner
            .writer
            .write(Vec::new(), None, events)
            .await
            .map(Option::unwrap_or_default)
    }

    async fn write_if(
        &self,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        self.inner
            .writer
            .write(Vec::new(), Some(guard), events)
            .await
    }

    async fn row_version(&self, kind: EntityKind, id: &str) -> Result<Option<i64>, StoreError> {
        let id = id.to_owned();
        self.read(move |c| fold::read_version(c, kind.table(), &id))
            .await
    }
}

#[async_trait::async_trait]
impl StreamSource for SqliteStore {
    fn subscribe_live(&self) -> broadcast::Receiver<StoredEvent> {
        self.inner.live.subscribe()
    }

    async fn high_water_mark(&self) -> Result<u64, StoreError> {
        self.read(|c| queries::latest_sequence(c, None)).await
    }

    async fn read_range(
        &self,
        filter: StreamFilter,
        through: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.read(move |c| queries::read_events(c, &filter, Some(through), limit))
            .await
    }
}

#[async_trait::async_trait]
impl EventFeed for SqliteStore {
    fn stream(&self, filter: StreamFilter) -> BoxStream<'static, Result<StoredEvent, StoreError>> {
        knife_store::replay_then_live(Arc::new(self.clone()), filter)
    }

    async fn latest_sequence(&self, thread: Option<&ThreadId>) -> Result<u64, StoreError> {
        let thread = thread.map(|t| t.as_str().to_owned());
        self.read(move |c| queries::latest_sequence(c, thread.as_deref()))
            .await
    }

    async fn read_events(
        &self,
        filter: &StreamFilter,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let filter = filter.clone();
        self.read(move |c| queries::read_events(c, &filter, None, limit))
            .await
    }
}

#[async_trait::async_trait]
impl Maintenance for SqliteStore {
    /// A log written before migration 0002 that holds several projects on one root
    /// folder rebuilds as the migration left it: the first keeps the root, later ones
    /// are kept without it.
    async fn rebuild(&self) -> Result<RebuildStats, StoreError> {
        let start = tokio::time::Instant::now();
        let events = self.inner.writer.run(writer::rebuild_projections).await?;
        let elapsed = start.elapsed();
        tracing::info!(events, ?elapsed, "rebuilt the knife projections");
        Ok(RebuildStats { events, elapsed })
    }

    /// `PRAGMA user_version`: the number of the last applied migration in `migrations/`.
    async fn schema_version(&self) -> Result<i64, StoreError> {
        self.read(schema::schema_version).await
    }

    /// Also `VACUUM`s the file and truncates the WAL, so the removed text is gone from
    /// disk too.
    async fn purge_deleted_threads(&self) -> Result<PurgeStats, StoreError> {
        let start = tokio::time::Instant::now();
        let (threads, events, events_kept) =
            self.inner.writer.run(purge::purge_deleted_threads).await?;
        let elapsed = start.elapsed();
        tracing::info!(
            threads = threads.len(),
            events,
            ?elapsed,
            "purged deleted threads"
        );
        Ok(PurgeStats {
            threads,
            events,
            events_kept,
            elapsed,
        })
    }

    async fn import_events(&self, events: Vec<StoredEvent>) -> Result<(), StoreError> {
        self.inner
            .writer
            .run(move |conn| import::import_events(conn, events))
            .await
    }
}

/// One node: nothing to relay (the defaults).
impl knife_store::LiveRelay for SqliteStore {}

#[async_trait::async_trait]
impl knife_store::Search for SqliteStore {
    async fn search(
        &self,
        query: &knife_store::SearchQuery,
    ) -> Result<Vec<knife_protocol::SearchHit>, StoreError> {
        let query = query.clone();
        self.read(move |c| queries::search(c, &query)).await
    }
}

#[async_trait::async_trait]
impl knife_store::UsageSums for SqliteStore {
    async fn usage_sums(
        &self,
        filter: &knife_store::UsageFilter,
    ) -> Result<Vec<knife_store::UsageSum>, StoreError> {
        let filter = filter.clone();
        self.read(move |c| queries::usage_sums(c, &filter)).await
    }
}

#[async_trait::async_trait]
impl ProjectionReads for SqliteStore {
    async fn list_projects(&self) -> Result<Vec<Project>, StoreError> {
        self.read(|c| {
            queries::list_entities(c, "SELECT payload_json FROM projects ORDER BY id", &[])
        })
        .await
    }

    async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError> {
        self.get(EntityKind::Project, id.as_str()).await
    }

    async fn project_by_root(&self, root: &str) -> Result<Option<Project>, StoreError> {
        let root = root.to_owned();
        self.read(move |c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM projects WHERE root = ?1",
                &[root.as_str()],
            )
        })
        .await
        .map(|mut found: Vec<Project>| found.pop())
    }

    async fn list_threads(&self, project: Option<&ProjectId>) -> Result<Vec<Thread>, StoreError> {
        let project = project.map(|p| p.as_str().to_owned());
        self.read(move |c| match &project {
            None => queries::list_entities(
                c,
                "SELECT payload_json FROM threads ORDER BY updated_at_us DESC, last_sequence DESC",
                &[],
            ),
            Some(p) => queries::list_entities(
                c,
                "SELECT payload_json FROM threads WHERE project_id = ?1 \
                 ORDER BY updated_at_us DESC, last_sequence DESC",
                &[p.as_str()],
            ),
        })
        .await
    }

    async fn get_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StoreError> {
        self.get(EntityKind::Thread, id.as_str()).await
    }

    async fn thread_with_version(
        &self,
        id: &ThreadId,
    ) -> Result<Option<(Thread, i64)>, StoreError> {
        let id = id.as_str().to_owned();
        self.read(move |c| queries::get_versioned(c, EntityKind::Thread.table(), &id))
            .await
    }

    async fn get_run(&self, id: &RunId) -> Result<Option<Run>, StoreError> {
        self.get(EntityKind::Run, id.as_str()).await
    }

    async fn thread_projection(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError> {
        let id = id.as_str().to_owned();
        self.read(move |c| queries::thread_projection(c, &id)).await
    }

    async fn get_provider_session(
        &self,
        id: &ProviderSessionId,
    ) -> Result<Option<ProviderSession>, StoreError> {
        self.get(EntityKind::ProviderSession, id.as_str()).await
    }

    async fn list_provider_sessions(&self) -> Result<Vec<ProviderSession>, StoreError> {
        self.read(|c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM provider_sessions ORDER BY created_sequence",
                &[],
            )
        })
        .await
    }

    async fn get_provider_thread(
        &self,
        id: &ProviderThreadId,
    ) -> Result<Option<ProviderThread>, StoreError> {
        self.get(EntityKind::ProviderThread, id.as_str()).await
    }

    async fn get_runtime_request(
        &self,
        id: &RuntimeRequestId,
    ) -> Result<Option<RuntimeRequest>, StoreError> {
        self.get(EntityKind::RuntimeRequest, id.as_str()).await
    }

    async fn get_turn_item(&self, id: &TurnItemId) -> Result<Option<TurnItem>, StoreError> {
        let id = id.as_str().to_owned();
        self.read(move |c| queries::get_turn_item(c, &id)).await
    }

    async fn dump_projections(
        &self,
    ) -> Result<BTreeMap<String, Vec<serde_json::Value>>, StoreError> {
        self.read(queries::dump_projections).await
    }
}
