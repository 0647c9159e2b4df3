// The store contract as object-safe traits (append + CAS, stream, reads, claims,
// process groups, activity, maintenance) that every backend implements.

use crate::error::StoreError;
use crate::types::{
    EntityKind, ProcessGroupRecord, PurgeStats, RebuildStats, RowGuard, SessionActivity,
    StreamFilter,
};
use futures::stream::BoxStream;
use knife_protocol::{
    DomainEvent, Project, ProjectId, ProviderSession, ProviderSessionId, ProviderThread,
    ProviderThreadId, Run, RunId, RuntimeRequest, RuntimeRequestId, StoredEvent, Thread, ThreadId,
    ThreadProjection, Timestamp, TurnItem, TurnItemId,
};
use std::collections::BTreeMap;

/// Append and compare-and-set: the only write path of the event log.
///
/// Every write is ONE transaction that appends the events (sequences consecutive,
/// increasing, in commit order) and folds them into the projections; after COMMIT the
/// stored events are offered to the live feed ([`EventFeed::stream`]) in sequence order.
#[async_trait::async_trait]
pub trait EventLog: Send + Sync {
    /// Appends `events` (in order) and applies them to the projections in one
    /// transaction; returns them with their sequences. An empty batch writes nothing
    /// and returns `[]`.
    ///
    /// Errors: [`StoreError::DuplicateEvent`], [`StoreError::ProjectRootTaken`] (a
    /// project on a folder another project already has), [`StoreError::Database`],
    /// [`StoreError::Serde`], [`StoreError::WriterGone`]; on error nothing of the batch
    /// is committed or published.
    ///
    /// Cancellation: dropping the future after its first poll does not cancel the
    /// write; it may still commit and be published.
    async fn write(&self, events: Vec<DomainEvent>) -> Result<Vec<StoredEvent>, StoreError>;

    /// Compare-and-set write (MGR-47): inside the same transaction as the append,
    /// re-reads the version of the row `(guard.kind, guard.id)`. When it differs from
    /// `guard.expected_version` (`None` = "the row must not exist") nothing is committed
    /// or published and the result is `Ok(None)` (the CAS conflict); otherwise behaves
    /// like [`EventLog::write`] and returns `Ok(Some(stored))`. An empty batch with a
    /// matching guard commits nothing and returns `Ok(Some([]))`.
    ///
    /// Errors and cancellation: as [`EventLog::write`].
    async fn write_if(
        &self,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError>;

    /// Current version of projection row `(kind, id)`: 1 after its first upsert, +1 per
    /// later upsert; `None` if absent. Pass it to [`RowGuard`] for [`EventLog::write_if`].
    async fn row_version(&self, kind: EntityKind, id: &str) -> Result<Option<i64>, StoreError>;
}

/// Reading the log in sequence order, and following it live.
#[async_trait::async_trait]
pub trait EventFeed: Send + Sync {
    /// Replays the events with `sequence > filter.after` that match the filter (thread
    /// and/or type), in sequence order, then follows live commits: no gap, no
    /// duplicate, even with concurrent appenders. The live subscription is taken during
    /// this call, so events committed after it are never missed however late the
    /// stream is first polled. A slow consumer costs a re-read from the table, never an
    /// event. Backends build it with [`crate::replay_then_live`].
    ///
    /// The stream does not end on its own (drop it to unsubscribe). If a table read
    /// fails it yields that one `Err` and ends.
    fn stream(&self, filter: StreamFilter) -> BoxStream<'static, Result<StoredEvent, StoreError>>;

    /// Highest event sequence in the log, or of the events of `thread`; 0 when none.
    async fn latest_sequence(&self, thread: Option<&ThreadId>) -> Result<u64, StoreError>;

    /// Up to `limit` stored events matching `filter` (`sequence > filter.after`,
    /// thread, type), in sequence order. Does not follow live commits.
    async fn read_events(
        &self,
        filter: &StreamFilter,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError>;
}

/// Reads of the projections (the latest whole entity per id). "Not found" is `Ok(None)`.
#[async_trait::async_trait]
pub trait ProjectionReads: Send + Sync {
    /// Every project, ordered by id.
    async fn list_projects(&self) -> Result<Vec<Project>, StoreError>;
    /// The project `id`, if it exists.
    async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError>;
    /// The project whose canonical root folder is `root` (compared byte for byte with
    /// [`Project::root`]), if any. At most one exists.
    async fn project_by_root(&self, root: &str) -> Result<Option<Project>, StoreError>;
    /// Threads, newest `updated_at` first (ties: most recently written first),
    /// optionally only those of `project`.
    async fn list_threads(&self, project: Option<&ProjectId>) -> Result<Vec<Thread>, StoreError>;
    /// The thread `id`, if it exists.
    async fn get_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StoreError>;
    /// The thread `id` and its row version ([`EventLog::row_version`]) read together in
    /// one round trip: the start of a compare-and-set write on the thread (a run's
    /// start and end; LIVE-07). `None` if it does not exist.
    async fn thread_with_version(&self, id: &ThreadId)
    -> Result<Option<(Thread, i64)>, StoreError>;
    /// The run `id`, if it exists.
    async fn get_run(&self, id: &RunId) -> Result<Option<Run>, StoreError>;
    /// The full projection of thread `id` from one consistent snapshot: runs by
    /// ordinal, turn items by ordinal, bound provider sessions by bind order, other
    /// entities by first appearance; `latest_sequence` = max sequence of the thread's
    /// events. `None` if the thread does not exist.
    async fn thread_projection(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError>;
    /// The provider session `id`, if it exists (bound to a thread or not).
    async fn get_provider_session(
        &self,
        id: &ProviderSessionId,
    ) -> Result<Option<ProviderSession>, StoreError>;
    /// Every provider session, in order of first appearance.
    async fn list_provider_sessions(&self) -> Result<Vec<ProviderSession>, StoreError>;
    /// The provider thread `id`, if it exists.
    async fn get_provider_thread(
        &self,
        id: &ProviderThreadId,
    ) -> Result<Option<ProviderThread>, StoreError>;
    /// The runtime request `id`, if it exists.
    async fn get_runtime_request(
        &self,
        id: &RuntimeRequestId,
    ) -> Result<Option<RuntimeRequest>, StoreError>;
    /// The turn item `id`, if it exists.
    async fn get_turn_item(&self, id: &TurnItemId) -> Result<Option<TurnItem>, StoreError>;
    /// Every projection table as JSON rows (`{column: value}`, `payload_json` parsed),
    /// keyed by table name, each ordered by primary key. For diagnostics and for
    /// checking that [`Maintenance::rebuild`] reproduces the incremental projections.
    async fn dump_projections(
        &self,
    ) -> Result<BTreeMap<String, Vec<serde_json::Value>>, StoreError>;
}

/// Execution claims: what the restart sweep and boot reconciliation read (EXEC-03..10).
#[async_trait::async_trait]
pub trait Claims: Send + Sync {
    /// Claimed top-level threads (`claimed_at` set, no parent), oldest claim
    /// first: the work the restart sweep resumes (EXEC-03).
    async fn list_suspended_threads(&self) -> Result<Vec<Thread>, StoreError>;
    /// Claimed child threads (`claimed_at` set, with a parent): claims the
    /// restart sweep releases without resuming (EXEC-03).
    async fn list_claimed_child_threads(&self) -> Result<Vec<Thread>, StoreError>;
    /// Runtime requests still `pending`, oldest first.
    async fn list_pending_runtime_requests(&self) -> Result<Vec<RuntimeRequest>, StoreError>;
}

/// Process-group records: spawned groups, so a restarted server kills leftovers.
/// Operational rows, not events: a rebuild leaves them alone.
#[async_trait::async_trait]
pub trait ProcessGroups: Send + Sync {
    /// Records a process group spawned by this server (replaces a row of the same
    /// node with the same pgid: the old group is gone once the kernel reuses its id).
    /// Rows are per node (SPEC SCALE-07): another host's pgid is another process.
    async fn register_process_group(&self, record: ProcessGroupRecord) -> Result<(), StoreError>;
    /// Forgets process group `pgid` of `node` (it ended, or was killed). No-op when
    /// absent; another node's row with the same pgid is left alone.
    async fn unregister_process_group(&self, node: &str, pgid: i32) -> Result<(), StoreError>;
    /// Every recorded process group of every node, by node then pgid (a node signals
    /// only its own: filter on [`ProcessGroupRecord::node`]).
    async fn list_process_groups(&self) -> Result<Vec<ProcessGroupRecord>, StoreError>;
}

/// Provider-session activity, for the stale-session reaper (SPEC.md REAP).
#[async_trait::async_trait]
pub trait Activity: Send + Sync {
    /// Every (provider session, bound thread) pair with its last-seen time, by
    /// session then thread.
    async fn list_session_activity(&self) -> Result<Vec<SessionActivity>, StoreError>;
    /// Marks provider session `id` as seen at `at` (callers throttle). Never moves the
    /// mark back. Operational, not an event: a rebuild resets the mark to the
    /// session's last `updated_at`. No-op for an unknown session.
    async fn touch_provider_session(
        &self,
        id: &ProviderSessionId,
        at: Timestamp,
    ) -> Result<(), StoreError>;
}

/// Whole-database operations (`knife db …`).
#[async_trait::async_trait]
pub trait Maintenance: Send + Sync {
    /// Drops every projection row and recomputes all projections from the events
    /// alone, with the same fold writes use, in one transaction (readers keep seeing
    /// the old projections until it commits). Returns the number of events folded and
    /// the elapsed time.
    async fn rebuild(&self) -> Result<RebuildStats, StoreError>;
    /// The schema version of the database: the number of the last applied migration.
    async fn schema_version(&self) -> Result<i64, StoreError>;
    /// Removes the events of every deleted thread (one with a `thread.deleted`
    /// tombstone, CHG-08) from the log for good, then rebuilds the projections from
    /// the remaining events (and compacts the storage where the backend can).
    /// Sequences are never reused, so the other threads' streams stay gap-free in their
    /// own terms (`after=N` still works). Meant for `knife db purge` with the server
    /// stopped; readers see the old state until the purge commits.
    ///
    /// Errors: [`StoreError::Database`] (nothing is removed then), [`StoreError::Serde`],
    /// [`StoreError::WriterGone`].
    async fn purge_deleted_threads(&self) -> Result<PurgeStats, StoreError>;
    /// Appends events that already have their sequences (read from another store:
    /// `knife db copy`, SPEC SCALE-09), in the given order, in one transaction, keeping
    /// each sequence; later appends continue above the highest. The projections are not
    /// folded: call [`Maintenance::rebuild`] once every batch is in. Nothing is
    /// published to live streams. Meant for an empty store with no server on it.
    ///
    /// Errors: [`StoreError::ImportOrder`] when a sequence is not above the log's last
    /// (or the previous one of the batch); [`StoreError::DuplicateEvent`];
    /// [`StoreError::Database`]. Nothing of the batch is written then.
    async fn import_events(&self, events: Vec<StoredEvent>) -> Result<(), StoreError>;
}

/// Full-text search over threads (SPEC.md TURN-08): the index the fold keeps
/// ([`crate::search`]: titles and settled turn items, in the transaction of the event
/// that settled them; emptied and refilled by [`Maintenance::rebuild`]).
#[async_trait::async_trait]
pub trait Search: Send + Sync {
    /// The documents matching every word of `query.text`
    /// ([`knife_protocol::search_terms`]: FTS syntax is never passed through, so no
    /// query is an error), of `query.project`'s threads when given, best first, at
    /// most `query.limit`; each with its thread, run and item ids and a snippet with
    /// the matched words between `[` and `]`. A query without words finds nothing.
    ///
    /// Errors: [`StoreError::Database`].
    async fn search(
        &self,
        query: &crate::SearchQuery,
    ) -> Result<Vec<knife_protocol::SearchHit>, StoreError>;
}

/// Usage sums over the per-model-call records (SPEC.md TURN-06/07; [`crate::usage`]).
#[async_trait::async_trait]
pub trait UsageSums: Send + Sync {
    /// The model calls `filter` selects, summed by the database per provider instance
    /// and model (and per run with [`crate::UsageFilter::by_run`]), in the order of
    /// [`crate::usage::sort_sums`]; no group when no call matches.
    ///
    /// Errors: [`StoreError::Database`].
    async fn usage_sums(
        &self,
        filter: &crate::UsageFilter,
    ) -> Result<Vec<crate::UsageSum>, StoreError>;
}

/// A whole store backend: every part of the contract. Implemented automatically for
/// any type that implements all of them; [`crate::Store`] holds one as
/// `Arc<dyn StoreBackend>`.
pub trait StoreBackend:
    EventLog
    + EventFeed
    + ProjectionReads
    + Claims
    + ProcessGroups
    + Activity
    + Maintenance
    + crate::leases::Leases
    + crate::cluster::Cluster
    + Search
    + UsageSums
    + crate::relay::LiveRelay
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> StoreBackend for T where
    T: EventLog
        + EventFeed
        + ProjectionReads
        + Claims
        + ProcessGroups
        + Activity
        + Maintenance
        + crate::leases::Leases
        + crate::cluster::Cluster
        + crate::cluster::Cluster
        + Search
        + UsageSums
        + crate::relay::LiveRelay
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}
