// knife-store: the event log and its projections on SQLite — the `Store` handle and
// its public API (single writer thread, read-only pool, CAS writes, gap-free streams).

//! knife-store: the append-only event log of knife and the projections folded from
//! it, in one SQLite file (ARCHITECTURE.md "Storage (knife-store)").
//!
//! # Design
//!
//! * **One writer.** A dedicated OS thread owns the only read-write connection.
//!   [`Store::write`] / [`Store::write_if`] send it a job and await the reply; each job
//!   is one `BEGIN IMMEDIATE` transaction that appends the events (sequences from
//!   `INTEGER PRIMARY KEY AUTOINCREMENT`) and folds them into the projection tables
//!   with the same function [`Store::rebuild`] uses. After COMMIT the writer publishes
//!   the stored events to the in-process live feed, in sequence order.
//! * **Many readers.** Queries run on a small pool of read-only connections on
//!   tokio's blocking pool; WAL lets them read while the writer writes.
//! * **Streams** ([`Store::stream`]) subscribe to the live feed *first*, then read the
//!   high-water mark `H`, replay `(after, H]` from the table in pages of 256 and then
//!   follow the feed, skipping anything `<= H`: no gap, no duplicate. A stream that
//!   falls behind the feed replays the hole from the table (see [`Store::stream`]).
//! * **Projections** hold the whole entity as JSON plus indexed columns and a
//!   `version` (1 on insert, +1 per upsert) used by compare-and-set writes (MGR-47).
//!
//! ```no_run
//! # async fn demo(ev: knife_protocol::DomainEvent) -> Result<(), knife_store::StoreError> {
//! use futures::StreamExt;
//! let store = knife_store::Store::open("/tmp/knife/knife.db").await?;
//! let mut live = store.stream(knife_store::StreamFilter::after(0));
//! let stored = store.write(vec![ev]).await?;
//! assert_eq!(live.next().await.transpose()?.map(|e| e.sequence), Some(stored[0].sequence));
//! # Ok(()) }
//! ```

mod claims;
mod error;
mod fold;
mod purge;
mod queries;
mod schema;
mod stream;
mod types;
mod writer;

pub use claims::{ProcessGroupRecord, SessionActivity};
pub use error::StoreError;
pub use purge::PurgeStats;
pub use types::{EntityKind, RebuildStats, RowGuard, StoreOptions, StreamFilter};

use futures::stream::BoxStream;
use knife_protocol::{
    DomainEvent, Project, ProjectId, ProviderSession, ProviderSessionId, ProviderThread,
    ProviderThreadId, Run, RunId, RuntimeRequest, RuntimeRequestId, StoredEvent, Thread, ThreadId,
    ThreadProjection, TurnItem, TurnItemId,
};
use queries::ReadPool;
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::broadcast;
use writer::Writer;

/// Handle to one knife database. Cheap to clone (an `Arc` inside), `Send + Sync`;
/// must be used from within a tokio runtime (reads use `spawn_blocking`).
///
/// The writer thread and the connections close when the last clone (including the
/// clones held by live streams) is dropped.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    writer: Writer,
    readers: Arc<ReadPool>,
    live: broadcast::Sender<StoredEvent>,
}

impl Store {
    /// Opens or creates the SQLite file at `path` (creating its directory), sets WAL,
    /// `synchronous=NORMAL`, a 5 s busy timeout and foreign keys, applies the embedded
    /// migrations, opens the read pool and starts the writer thread.
    ///
    /// Errors: [`StoreError::Open`] naming the path and what to do (e.g. "cannot create
    /// the data directory /x: permission denied; choose a writable --data-dir"),
    /// [`StoreError::SchemaTooNew`], [`StoreError::Migration`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        Self::open_with(path, StoreOptions::default()).await
    }

    /// [`Store::open`] with explicit [`StoreOptions`] (read pool size, live feed capacity).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: StoreOptions,
    ) -> Result<Store, StoreError> {
        let path = path.as_ref().to_owned();
        let (conn, readers) = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || -> Result<(Connection, ReadPool), StoreError> {
                let conn = schema::open_writer(&path)?;
                let readers = ReadPool::open(path, options.readers)?;
                Ok((conn, readers))
            })
            .await
            .map_err(|e| StoreError::ReadTask(e.to_string()))??
        };
        let writer = Writer::spawn(conn).map_err(|e| StoreError::Open {
            path: path.clone(),
            message: format!(
                "cannot start the writer thread: {e}; the system is out of threads or memory"
            ),
        })?;
        let (live, _) = broadcast::channel(options.live_capacity.max(1));
        tracing::debug!(path = %path.display(), "knife store open");
        Ok(Store {
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

    /// The only write path: appends `events` (in order) and applies them to the
    /// projections in ONE `BEGIN IMMEDIATE` transaction on the writer thread; after
    /// COMMIT publishes them to the live feed. Returns them with their sequences
    /// (consecutive, increasing). An empty batch writes nothing and returns `[]`.
    ///
    /// Errors: [`StoreError::DuplicateEvent`], [`StoreError::ProjectRootTaken`] (a
    /// project on a folder another project already has), [`StoreError::Sqlite`],
    /// [`StoreError::Serde`], [`StoreError::WriterGone`]; on error nothing of the batch
    /// is committed or published.
    ///
    /// Cancellation: dropping the future after its first poll does not cancel the
    /// write; it may still commit and be published.
    pub async fn write(&self, events: Vec<DomainEvent>) -> Result<Vec<StoredEvent>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let live = self.inner.live.clone();
        self.inner
            .writer
            .run(move |conn| writer::write_batch(conn, None, events, &live))
            .await
            .map(Option::unwrap_or_default)
    }

    /// Compare-and-set write (MGR-47): inside the same transaction as the append, re-reads
    /// the version of the row `(guard.kind, guard.id)`. When it differs from
    /// `guard.expected_version` (`None` = "the row must not exist") nothing is committed
    /// or published and the result is `Ok(None)`; otherwise behaves like [`Store::write`]
    /// and returns `Ok(Some(stored))`. An empty batch with a matching guard commits
    /// nothing and returns `Ok(Some([]))`.
    ///
    /// Errors and cancellation: as [`Store::write`].
    pub async fn write_if(
        &self,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        let live = self.inner.live.clone();
        self.inner
            .writer
            .run(move |conn| writer::write_batch(conn, Some(&guard), events, &live))
            .await
    }

    /// Replays the events with `sequence > filter.after` that match the filter (thread
    /// and/or type), in sequence order, then follows live commits: no gap, no duplicate.
    ///
    /// How: the live subscription is taken *during this call* (before returning); on
    /// first poll the stream reads the high-water mark `H`, replays `(after, H]` from the
    /// table in pages of 256, then yields live events with `sequence > max(H, after)`.
    /// Events committed after this call are never missed, even if the stream is polled
    /// much later.
    ///
    /// Lag: the live feed is bounded ([`StoreOptions::live_capacity`]). A stream that
    /// falls behind gets `Lagged` from the feed; it then re-reads the table from the
    /// last sequence it accounted for up to a fresh high-water mark and continues live,
    /// skipping anything already yielded. Slow consumers cost a re-read, never an event.
    ///
    /// The stream does not end on its own (drop it to unsubscribe). If a table read
    /// fails it yields that one `Err` and ends.
    pub fn stream(
        &self,
        filter: StreamFilter,
    ) -> BoxStream<'static, Result<StoredEvent, StoreError>> {
        stream::stream(self, filter)
    }

    /// Highest event sequence in the log, or of the events of `thread`; 0 when none.
    pub async fn latest_sequence(&self, thread: Option<&ThreadId>) -> Result<u64, StoreError> {
        let thread = thread.map(|t| t.as_str().to_owned());
        self.read(move |c| queries::latest_sequence(c, thread.as_deref()))
            .await
    }

    /// Up to `limit` stored events matching `filter` (`sequence > filter.after`,
    /// thread, type), in sequence order. Does not follow live commits.
    pub async fn read_events(
        &self,
        filter: &StreamFilter,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let filter = filter.clone();
        self.read(move |c| queries::read_events(c, &filter, None, limit))
            .await
    }

    /// Drops every projection row and recomputes all projection tables from `events`
    /// alone, with the same fold `write` uses, in one transaction (readers keep seeing
    /// the old projections until it commits). Returns the number of events folded and
    /// the elapsed time. A log written before migration 0002 that holds several
    /// projects on one root folder rebuilds as the migration left it: the first keeps
    /// the root, later ones are kept without it.
    pub async fn rebuild(&self) -> Result<RebuildStats, StoreError> {
        let start = tokio::time::Instant::now();
        let events = self.inner.writer.run(writer::rebuild_projections).await?;
        let elapsed = start.elapsed();
        tracing::info!(events, ?elapsed, "rebuilt the knife projections");
        Ok(RebuildStats { events, elapsed })
    }

    /// Removes the events of every deleted thread (one with a `thread.deleted`
    /// tombstone, CHG-08) from the log for good, then rebuilds the projections from
    /// the remaining events and vacuums the file. Sequences are never reused, so the
    /// other threads' streams stay gap-free in their own terms (`after=N` still works).
    /// Meant for `knife db purge` with the server stopped; readers of this store see
    /// the old state until the purge commits.
    ///
    /// Errors: [`StoreError::Sqlite`] (nothing is removed then), [`StoreError::Serde`],
    /// [`StoreError::WriterGone`].
    pub async fn purge_deleted_threads(&self) -> Result<PurgeStats, StoreError> {
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

    /// Current version of projection row `(kind, id)`: 1 after its first upsert, +1 per
    /// later upsert; `None` if absent. Pass it to [`RowGuard`] for [`Store::write_if`].
    pub async fn row_version(&self, kind: EntityKind, id: &str) -> Result<Option<i64>, StoreError> {
        let id = id.to_owned();
        self.read(move |c| fold::read_version(c, kind.table(), &id))
            .await
    }

    /// Every project, ordered by id.
    pub async fn list_projects(&self) -> Result<Vec<Project>, StoreError> {
        self.read(|c| {
            queries::list_entities(c, "SELECT payload_json FROM projects ORDER BY id", &[])
        })
        .await
    }

    /// The project `id`, if it exists.
    pub async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError> {
        self.get(EntityKind::Project, id.as_str()).await
    }

    /// The project whose canonical root folder is `root` (compared byte for byte with
    /// [`Project::root`]), if any. At most one exists (UNIQUE index, migration 0002).
    pub async fn project_by_root(&self, root: &str) -> Result<Option<Project>, StoreError> {
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

    /// Threads, newest `updated_at` first (ties: most recently written first),
    /// optionally only those of `project`.
    pub async fn list_threads(
        &self,
        project: Option<&ProjectId>,
    ) -> Result<Vec<Thread>, StoreError> {
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

    /// The thread `id`, if it exists.
    pub async fn get_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StoreError> {
        self.get(EntityKind::Thread, id.as_str()).await
    }

    /// The run `id`, if it exists.
    pub async fn get_run(&self, id: &RunId) -> Result<Option<Run>, StoreError> {
        self.get(EntityKind::Run, id.as_str()).await
    }

    /// The full projection of thread `id` from one consistent snapshot: runs by
    /// ordinal, turn items by ordinal, bound provider sessions by bind order, other
    /// entities by first appearance; `latest_sequence` = max sequence of the thread's
    /// events. `None` if the thread does not exist.
    pub async fn thread_projection(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError> {
        let id = id.as_str().to_owned();
        self.read(move |c| queries::thread_projection(c, &id)).await
    }

    /// The provider session `id`, if it exists (bound to a thread or not).
    pub async fn get_provider_session(
        &self,
        id: &ProviderSessionId,
    ) -> Result<Option<ProviderSession>, StoreError> {
        self.get(EntityKind::ProviderSession, id.as_str()).await
    }

    /// Every provider session, in order of first appearance.
    pub async fn list_provider_sessions(&self) -> Result<Vec<ProviderSession>, StoreError> {
        self.read(|c| {
            queries::list_entities(
                c,
                "SELECT payload_json FROM provider_sessions ORDER BY created_sequence",
                &[],
            )
        })
        .await
    }

    /// The provider thread `id`, if it exists.
    pub async fn get_provider_thread(
        &self,
        id: &ProviderThreadId,
    ) -> Result<Option<ProviderThread>, StoreError> {
        self.get(EntityKind::ProviderThread, id.as_str()).await
    }

    /// The runtime request `id`, if it exists.
    pub async fn get_runtime_request(
        &self,
        id: &RuntimeRequestId,
    ) -> Result<Option<RuntimeRequest>, StoreError> {
        self.get(EntityKind::RuntimeRequest, id.as_str()).await
    }

    /// The turn item `id`, if it exists.
    pub async fn get_turn_item(&self, id: &TurnItemId) -> Result<Option<TurnItem>, StoreError> {
        self.get(EntityKind::TurnItem, id.as_str()).await
    }

    /// Every projection table as JSON rows (`{column: value}`, `payload_json` parsed),
    /// keyed by table name, each ordered by primary key. For diagnostics and for
    /// checking that [`Store::rebuild`] reproduces the incremental projections.
    pub async fn dump_projections(
        &self,
    ) -> Result<BTreeMap<String, Vec<serde_json::Value>>, StoreError> {
        self.read(queries::dump_projections).await
    }

    /// The schema version of the file (`PRAGMA user_version`: the number of the last
    /// applied migration in `migrations/`).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        self.read(schema::schema_version).await
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
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.inner.readers.read(f).await
    }

    /// Events matching `filter` in `(filter.after, through]`, at most `limit`.
    pub(crate) async fn read_range(
        &self,
        filter: StreamFilter,
        through: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.read(move |c| queries::read_events(c, &filter, Some(through), limit))
            .await
    }

    /// A new subscription to the live feed of committed events.
    pub(crate) fn subscribe_live(&self) -> broadcast::Receiver<StoredEvent> {
        self.inner.live.subscribe()
    }
}
