// knife-store-postgres: the several-node backend of the knife store contract — one
// PostgreSQL database shared by every node, commit-ordered sequences, LISTEN/NOTIFY.

//! knife-store-postgres: implements the `knife-store` contract on PostgreSQL
//! (ARCHITECTURE.md "Scale-out", SPEC SCALE-01..03; docs/2026-12-01-store-postgres.md).
//!
//! * **Driver**: `tokio-postgres` with a `deadpool-postgres` pool; no TLS yet.
//! * **Appends** take a transaction-scoped advisory lock, then `MAX(sequence) + 1`: all
//!   appends of all nodes are serialised, so sequences are in commit order and every
//!   reader sees a gap-free prefix of the log (SCALE-02).
//! * **Live feed**: each node LISTENs on `knife_events`; a NOTIFY (sent inside the
//!   append transaction, so delivered at COMMIT) only wakes the node's pump, which
//!   reads the new rows from `events` and publishes them to the in-process feed that
//!   `knife_store::replay_then_live` streams follow (SCALE-03).
//! * **Fold**: `knife_store::fold::plan`, shared with SQLite.
//! * **Migrations**: embedded, numbered, tracked in `knife_migrations`, applied under an
//!   advisory lock.

#![deny(missing_docs)]

mod claims;
mod cluster;
mod error;
mod feed;
mod fold;
mod group;
mod import;
mod leases;
mod pipelined;
mod read;
mod relay;
mod schema;
mod write;

#[cfg(feature = "test-cluster")]
pub mod testing;

use error::PgResult;
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
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, broadcast};

/// Tuning knobs of [`PgStore::open_with`]; `Default` is what [`open`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgOptions {
    /// Pooled connections of this node (default 8, at least 1), plus one LISTEN
    /// connection.
    pub max_connections: usize,
    /// Capacity of the in-process live feed, in events (default 4096); a stream that
    /// falls further behind recovers from the table.
    pub live_capacity: usize,
    /// Longest wait between table reads of the live feed when no NOTIFY arrives
    /// (default 1 s): bounds latency after a lost notification, never correctness.
    pub poll_fallback: Duration,
    /// How long the server lets one of this node's connections sit idle inside a
    /// transaction before it ends that session (PostgreSQL
    /// `idle_in_transaction_session_timeout`; default 5 s, `None` leaves the server's
    /// setting). A node paused or cut off mid-append (SIGSTOP, a frozen VM, a network
    /// partition that keeps the TCP connection) would otherwise hold the cluster-wide
    /// append lock and stall every node's writes and the takeover of its own threads
    /// (SCALE-04/05). Its transaction is rolled back: nothing half-written.
    pub idle_in_transaction_timeout: Option<Duration>,
    /// Appends of this node written together in one transaction at most (group commit,
    /// crate::group; default 64, 1 = each append its own transaction). The appends
    /// queued while the node's previous transaction runs share the next one.
    pub group_appends: usize,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            max_connections: 8,
            live_capacity: 4096,
            poll_fallback: Duration::from_secs(1),
            idle_in_transaction_timeout: Some(Duration::from_secs(5)),
            group_appends: 64,
        }
    }
}

/// Connects to the PostgreSQL database at `url` (`postgres://user:pw@host:port/db` or
/// `host=… dbname=…`), applies the migrations and wraps it in a [`Store`].
pub async fn open(url: &str) -> Result<Store, StoreError> {
    PgStore::open_with(url, PgOptions::default())
        .await
        .map(Store::new)
}

/// [`open`] with explicit [`PgOptions`].
pub async fn open_with(url: &str, options: PgOptions) -> Result<Store, StoreError> {
    PgStore::open_with(url, options).await.map(Store::new)
}

/// One knife database on PostgreSQL, shared with the other nodes. Cheap to clone.
/// The pool, the LISTEN connection and the pump stop when the last clone (including
/// those held by live streams) is dropped.
#[derive(Clone, Debug)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    location: String,
    pool: deadpool_postgres::Pool,
    live: broadcast::Sender<StoredEvent>,
    pump: tokio::task::AbortHandle,
    /// This node's live messages for the other nodes (crate::relay).
    outbox: relay::Outbox,
    /// The other nodes' live messages, reassembled by the LISTEN connection.
    relayed: broadcast::Sender<Arc<knife_store::RelayedLive>>,
    sender: tokio::task::AbortHandle,
    /// This node's append queue (group commit, crate::group).
    committer: group::Committer,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.pump.abort();
        self.sender.abort();
    }
}

impl PgStore {
    /// Connects, applies pending migrations, starts the LISTEN pump.
    ///
    /// Errors: [`StoreError::Open`] with the URL (password hidden) and what to do,
    /// [`StoreError::SchemaTooNew`], [`StoreError::Migration`].
    pub async fn open_with(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
        let location = redact(url);
        let open_err = |message: String| StoreError::Open {
            location: location.clone(),
            message,
        };
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            open_err(format!(
                "not a PostgreSQL URL ({e}); use postgres://user:password@host:port/database"
            ))
        })?;
        if let Some(timeout) = options.idle_in_transaction_timeout {
            // Appended to the URL's own `options`, so a setting given there is kept.
            let setting = format!(
                "-c idle_in_transaction_session_timeout={}",
                timeout.as_millis().max(1)
            );
            let options = match config.get_options() {
                Some(given) if !given.is_empty() => format!("{given} {setting}"),
                _ => setting,
            };
            config.options(&options);
        }
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(options.max_connections.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(Duration::from_secs(10)))
            .wait_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|e| open_err(format!("cannot build the connection pool: {e}")))?;
        let mut client = pool.get().await.map_err(|e| {
            open_err(format!(
                "cannot connect ({e}); check that PostgreSQL runs, that this node can reach \
                 it and that the user, password and database in the URL are right"
            ))
        })?;
        schema::migrate(&mut client).await?;
        let after = read::latest_sequence(&**client, None).await?;
        drop(client);
        let (live, _) = broadcast::channel(options.live_capacity.max(1));
        let wake = Arc::new(Notify::new());
        let (relayed, _) = broadcast::channel(options.live_capacity.max(1));
        let sender_id = {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new()
                .hash_one((std::process::id(), std::time::SystemTime::now()))
        };
        let pump = tokio::spawn(
            feed::Pump {
                pool: pool.clone(),
                config,
                live: live.clone(),
                wake: wake.clone(),
                after,
                poll_fallback: options.poll_fallback,
                relayed: relayed.clone(),
                sender: sender_id,
            }
            .run(),
        )
        .abort_handle();
        let (outbox, outgoing) = relay::Outbox::new();
        let sender =
            tokio::spawn(relay::run_sender(pool.clone(), sender_id, outgoing)).abort_handle();
        let committer = group::Committer::start(pool.clone(), wake, options.group_appends);
        tracing::debug!(%location, "knife store open on PostgreSQL");
        Ok(PgStore {
            inner: Arc::new(Inner {
                location,
                pool,
                live,
                pump,
                outbox,
                relayed,
                sender,
                committer,
            }),
        })
    }

    /// The database URL, password hidden.
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    pub(crate) async fn client(&self) -> PgResult<deadpool_postgres::Object> {
        Ok(self.inner.pool.get().await?)
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        kind: EntityKind,
        id: &str,
    ) -> Result<Option<T>, StoreError> {
        let client = self.client().await?;
        Ok(read::get_entity(&**client, kind.table(), id).await?)
    }

    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<T>, StoreError> {
        let client = self.client().await?;
        Ok(read::list_entities(&**client, sql, params).await?)
    }

    /// Encodes and plans `events` here, then queues the append on the node's committer
    /// (group commit: crate::group), which writes it in its own task, so dropping the
    /// caller's future does not cancel a transaction half-way (the contract: a write
    /// once polled may still commit), as the SQLite writer thread does.
    pub(crate) async fn write_batch(
        &self,
        fences: Vec<knife_store::Lease>,
        guard: Option<RowGuard>,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        let events = events
            .into_iter()
            .map(write::Ready::new)
            .collect::<Result<Vec<_>, _>>()?;
        self.inner
            .committer
            .append(write::Append {
                fences,
                guard,
                events,
            })
            .await
    }
}

/// `url` with its password replaced by `***` (URL and key=value forms).
pub fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((userinfo, host)) = rest.rsplit_once('@')
            && let Some((user, _)) = userinfo.split_once(':')
        {
            return format!("{scheme}://{user}:***@{host}");
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => "password=***".to_owned(),
            _ => kv.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[async_trait::async_trait]
impl EventLog for PgStore {
    async fn write(&self, events: Vec<DomainEvent>) -> Result<Vec<StoredEvent>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        self.write_batch(Vec::new(), None, events)
            .await
            .map(Option::unwrap_or_default)
    }

    async fn write_if(
        &self,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        self.write_batch(Vec::new(), Some(guard), events).await
    }

    async fn row_version(&self, kind: EntityKind, id: &str) -> Result<Option<i64>, StoreError> {
        let client = self.client().await?;
        Ok(write::read_version(&**client, kind.table(), id).await?)
    }
}

#[async_trait::async_trait]
impl StreamSource for PgStore {
    fn subscribe_live(&self) -> broadcast::Receiver<StoredEvent> {
        self.inner.live.subscribe()
    }

    async fn high_water_mark(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        Ok(read::latest_sequence(&**client, None).await?)
    }

    async fn read_range(
        &self,
        filter: StreamFilter,
        through: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let client = self.client().await?;
        Ok(read::read_events(&**client, &filter, Some(through), limit).await?)
    }
}

#[async_trait::async_trait]
impl EventFeed for PgStore {
    fn stream(&self, filter: StreamFilter) -> BoxStream<'static, Result<StoredEvent, StoreError>> {
        knife_store::replay_then_live(Arc::new(self.clone()), filter)
    }

    async fn latest_sequence(&self, thread: Option<&ThreadId>) -> Result<u64, StoreError> {
        let client = self.client().await?;
        Ok(read::latest_sequence(&**client, thread.map(knife_protocol::ThreadId::as_str)).await?)
    }

    async fn read_events(
        &self,
        filter: &StreamFilter,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let client = self.client().await?;
        Ok(read::read_events(&**client, filter, None, limit).await?)
    }
}

#[async_trait::async_trait]
impl Maintenance for PgStore {
    async fn rebuild(&self) -> Result<RebuildStats, StoreError> {
        let start = tokio::time::Instant::now();
        let mut client = self.client().await?;
        let events = write::rebuild(&mut client).await?;
        let elapsed = start.elapsed();
        tracing::info!(events, ?elapsed, "rebuilt the knife projections");
        Ok(RebuildStats { events, elapsed })
    }

    /// The highest migration recorded in `knife_migrations`.
    async fn schema_version(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        Ok(schema::current_version(&**client).await?)
    }

    /// In one transaction under the append lock; PostgreSQL's autovacuum reclaims the
    /// space of the removed rows later.
    async fn purge_deleted_threads(&self) -> Result<PurgeStats, StoreError> {
        let start = tokio::time::Instant::now();
        let mut client = self.client().await?;
        let (threads, events, events_kept) = write::purge_deleted_threads(&mut client).await?;
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
        let mut pooled = self.client().await?;
        let client: &mut tokio_postgres::Client = &mut pooled;
        Ok(import::import_events(client, events).await?)
    }
}

/// Live deltas to and from the other nodes: chunked NOTIFY payloads on `knife_deltas`
/// (crate::relay; issue 17 item 2).
impl knife_store::LiveRelay for PgStore {
    fn relay_live(&self, message: knife_store::RelayedLive) {
        self.inner.outbox.send(message);
    }

    fn relayed_live(&self) -> Option<broadcast::Receiver<Arc<knife_store::RelayedLive>>> {
        Some(self.inner.relayed.subscribe())
    }
}

#[async_trait::async_trait]
impl knife_store::Search for PgStore {
    async fn search(
        &self,
        query: &knife_store::SearchQuery,
    ) -> Result<Vec<knife_protocol::SearchHit>, StoreError> {
        let client = self.client().await?;
        Ok(read::search(&client, query).await?)
    }
}

#[async_trait::async_trait]
impl knife_store::UsageSums for PgStore {
    async fn usage_sums(
        &self,
        filter: &knife_store::UsageFilter,
    ) -> Result<Vec<knife_store::UsageSum>, StoreError> {
        let client = self.client().await?;
        Ok(read::usage_sums(&client, filter).await?)
    }
}

#[async_trait::async_trait]
impl ProjectionReads for PgStore {
    async fn list_projects(&self) -> Result<Vec<Project>, StoreError> {
        self.list(
            "SELECT payload_json FROM projects ORDER BY id COLLATE \"C\"",
            &[],
        )
        .await
    }

    async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError> {
        self.get(EntityKind::Project, id.as_str()).await
    }

    async fn project_by_root(&self, root: &str) -> Result<Option<Project>, StoreError> {
        self.list(
            "SELECT payload_json FROM projects WHERE root = $1",
            &[&root],
        )
        .await
        .map(|mut found: Vec<Project>| found.pop())
    }

    async fn list_threads(&self, project: Option<&ProjectId>) -> Result<Vec<Thread>, StoreError> {
        match project {
            None => {
                self.list(
                    "SELECT payload_json FROM threads \
                     ORDER BY updated_at_us DESC, last_sequence DESC",
                    &[],
                )
                .await
            }
            Some(p) => {
                self.list(
                    "SELECT payload_json FROM threads WHERE project_id = $1 \
                     ORDER BY updated_at_us DESC, last_sequence DESC",
                    &[&p.as_str()],
                )
                .await
            }
        }
    }

    async fn get_thread(&self, id: &ThreadId) -> Result<Option<Thread>, StoreError> {
        self.get(EntityKind::Thread, id.as_str()).await
    }

    async fn thread_with_version(
        &self,
        id: &ThreadId,
    ) -> Result<Option<(Thread, i64)>, StoreError> {
        let client = self.client().await?;
        Ok(read::get_versioned(&**client, EntityKind::Thread.table(), id.as_str()).await?)
    }

    async fn get_run(&self, id: &RunId) -> Result<Option<Run>, StoreError> {
        self.get(EntityKind::Run, id.as_str()).await
    }

    async fn thread_projection(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError> {
        let mut client = self.client().await?;
        Ok(read::thread_projection(&mut client, id.as_str()).await?)
    }

    async fn get_provider_session(
        &self,
        id: &ProviderSessionId,
    ) -> Result<Option<ProviderSession>, StoreError> {
        self.get(EntityKind::ProviderSession, id.as_str()).await
    }

    async fn list_provider_sessions(&self) -> Result<Vec<ProviderSession>, StoreError> {
        self.list(
            "SELECT payload_json FROM provider_sessions ORDER BY created_sequence",
            &[],
        )
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
        let client = self.client().await?;
        Ok(read::get_turn_item(&**client, id.as_str()).await?)
    }

    async fn dump_projections(
        &self,
    ) -> Result<BTreeMap<String, Vec<serde_json::Value>>, StoreError> {
        let mut client = self.client().await?;
        Ok(read::dump_projections(&mut client).await?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use knife_protocol::EventBody;
    use knife_store::contract::fixtures::{ev, project};

    #[test]
    fn redact_hides_the_password_in_both_url_forms() {
        assert_eq!(
            redact("postgres://knife:s3cret@db:5432/knife"),
            "postgres://knife:***@db:5432/knife"
        );
        assert_eq!(
            redact("postgres://knife@db/knife"),
            "postgres://knife@db/knife"
        );
        assert_eq!(
            redact("host=/tmp port=5 user=k password=s3cret dbname=x"),
            "host=/tmp port=5 user=k password=*** dbname=x"
        );
    }

    /// A node paused in the middle of an append (SIGSTOP, a frozen VM) holds the
    /// cluster-wide append lock inside an open transaction; the server ends that
    /// session after `idle_in_transaction_timeout`, so the other nodes' writes go on
    /// (SCALE-04/05: the takeover of the paused node's threads must be able to write).
    #[tokio::test]
    #[cfg_attr(
        not(knife_has_postgres),
        ignore = "needs PostgreSQL (Debian package postgresql, or KNIFE_PG_BIN)"
    )]
    async fn scale_04_a_node_stalled_inside_an_append_does_not_stall_the_other_nodes() {
        let cluster = testing::cluster().await;
        let db = cluster.fresh_database().await;
        let stalled = PgStore::open_with(
            &cluster.url(&db),
            PgOptions {
                idle_in_transaction_timeout: Some(Duration::from_millis(300)),
                ..PgOptions::default()
            },
        )
        .await
        .unwrap();
        let other = open(&cluster.url(&db)).await.unwrap();
        let client = stalled.inner.pool.get().await.unwrap();
        client.batch_execute("BEGIN").await.unwrap();
        client
            .execute("SELECT pg_advisory_xact_lock($1)", &[&write::APPEND_LOCK])
            .await
            .unwrap();
        // The stalled node sends nothing more; the other node's append waits for the
        // lock only until the server ends the stalled session.
        let written = tokio::time::timeout(
            Duration::from_secs(20),
            other.write(vec![ev(EventBody::ProjectCreated(project("p1", 1)))]),
        )
        .await
        .expect("the other node's append is stalled by the paused node's transaction")
        .unwrap();
        assert_eq!(written.len(), 1);
        let err = client
            .execute("SELECT 1", &[])
            .await
            .expect_err("the stalled session was ended by the server");
        assert!(err.is_closed() || err.to_string().contains("idle"), "{err}");
    }
}
