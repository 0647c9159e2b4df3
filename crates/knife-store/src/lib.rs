// knife-store: the store contract — the traits every backend implements, the
// backend-neutral types and errors, the `Store` handle and the shared stream logic.

//! knife-store: the contract of knife's append-only event log and the projections
//! folded from it (ARCHITECTURE.md "Storage"). It names no backend: the SQLite backend
//! is `knife-store-sqlite`; only the `knife` binary (composition root) and tests pick
//! one and wrap it in a [`Store`].
//!
//! # Shape (docs/2026-12-01-store-contract.md)
//!
//! * The contract is a set of object-safe `async_trait` traits grouped by concern:
//!   [`EventLog`] (append, compare-and-set), [`EventFeed`] (gap-free replay-then-live
//!   streams, log reads), [`ProjectionReads`], [`Claims`], [`ProcessGroups`],
//!   [`Activity`], [`Maintenance`], [`Leases`] (SCALE-04), [`Cluster`] (SCALE-05/07), [`LiveRelay`]
//!   (live deltas between nodes). [`StoreBackend`] is all of them.
//! * [`Store`] is the handle callers hold: a cheap clone of `Arc<dyn StoreBackend>`
//!   that derefs to the backend, so `store.write(events)` calls [`EventLog::write`]
//!   without importing the trait.
//! * Backends build [`EventFeed::stream`] from [`replay_then_live`] so the no-gap,
//!   no-duplicate protocol is written once.
//! * With the `contract-tests` feature, [`contract`] holds the one test suite every
//!   backend runs ([`store_contract_tests!`]).
//!
//! ```no_run
//! # async fn demo(store: knife_store::Store, ev: knife_protocol::DomainEvent) -> Result<(), knife_store::StoreError> {
//! use futures::StreamExt;
//! let mut live = store.stream(knife_store::StreamFilter::after(0));
//! let stored = store.write(vec![ev]).await?;
//! assert_eq!(live.next().await.transpose()?.map(|e| e.sequence), Some(stored[0].sequence));
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod cluster;
mod error;
pub mod fold;
pub mod leases;
mod node;
pub mod relay;
pub mod search;
mod stream;
mod traits;
mod types;

#[cfg(feature = "contract-tests")]
pub mod contract;

pub use cluster::{Cluster, NodeMember};
pub use error::{BackendError, StoreError};
pub use leases::{DEFAULT_LEASE_HEARTBEAT, DEFAULT_LEASE_TTL, Lease, Leases, TakeScope};
pub use node::{Fences, LOCAL_NODE, NodeLeases};
pub use relay::{LiveRelay, RelayedLive};
pub use search::SearchQuery;
pub use stream::{REPLAY_PAGE, StreamSource, replay_then_live};
pub use traits::{
    Activity, Claims, EventFeed, EventLog, Maintenance, ProcessGroups, ProjectionReads, Search,
    StoreBackend,
};
pub use types::{
    EntityKind, ProcessGroupRecord, PurgeStats, RebuildStats, RowGuard, SessionActivity,
    StreamFilter,
};

use knife_protocol::{DomainEvent, StoredEvent, ThreadId, ThreadProjection};
use std::sync::Arc;

/// Handle to one knife store, whatever its backend. Cheap to clone (an `Arc` inside),
/// `Send + Sync`. Derefs to [`StoreBackend`], so every contract method is called on it
/// directly (`store.write(..)`, `store.stream(..)`, `store.get_thread(..)`).
///
/// The backend closes (writer stopped, connections closed) when the last clone,
/// including the clones held by live streams, is dropped.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Arc<dyn StoreBackend>,
    node: Arc<NodeLeases>,
}

impl Store {
    /// Wraps a backend (e.g. `knife_store_sqlite::SqliteStore`).
    pub fn new(backend: impl StoreBackend) -> Store {
        Store {
            backend: Arc::new(backend),
            node: Arc::default(),
        }
    }

    /// Wraps a backend already behind an `Arc`.
    pub fn from_arc(backend: Arc<dyn StoreBackend>) -> Store {
        Store {
            backend,
            node: Arc::default(),
        }
    }

    /// This handle (and its clones) writing as node `node` (SPEC SCALE-04); the
    /// default is [`LOCAL_NODE`] with 10 s leases. Set once by the composition root.
    pub fn with_node(self, node: NodeLeases) -> Store {
        Store {
            backend: self.backend,
            node: Arc::new(node),
        }
    }

    /// The node this handle writes for and the leases it holds.
    pub fn node(&self) -> &NodeLeases {
        &self.node
    }

    /// The backend as a shared trait object.
    pub fn backend(&self) -> &Arc<dyn StoreBackend> {
        &self.backend
    }

    /// [`EventLog::write`]. Inherent so that it wins method resolution over traits of
    /// the same name implemented for `Store` elsewhere (knife-runtime's `SessionStore`).
    ///
    /// A batch touching a thread this node holds a lease on is fenced by it
    /// ([`Leases::write_fenced`], SCALE-04); [`StoreError::Fenced`] marks that lease lost,
    /// and later writes of the thread are then refused at once.
    pub async fn write(&self, events: Vec<DomainEvent>) -> Result<Vec<StoredEvent>, StoreError> {
        self.fenced(None, events)
            .await
            .map(Option::unwrap_or_default)
    }

    /// [`EventLog::write_if`]; inherent for the same reason as [`Store::write`], and
    /// fenced the same way.
    pub async fn write_if(
        &self,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        self.fenced(Some(guard), events).await
    }

    /// `write` / `write_if` as this node: fenced by the leases it holds on the batch's
    /// threads; refused at once for a thread whose lease it lost.
    async fn fenced(
        &self,
        guard: Option<RowGuard>,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        let fences = match self.node.fences_for(&events) {
            Fences::None => {
                return match guard {
                    Some(guard) => self.backend.write_if(guard, events).await,
                    None => self.backend.write(events).await.map(Some),
                };
            }
            Fences::Lost(lease) => {
                return Err(StoreError::Fenced {
                    thread_id: lease.thread_id,
                    node: lease.node,
                    epoch: lease.epoch,
                    current: "taken over by another node".into(),
                });
            }
            Fences::Check(fences) => fences,
        };
        let result = self.backend.write_fenced(&fences, guard, events).await;
        if let Err(StoreError::Fenced {
            thread_id, epoch, ..
        }) = &result
        {
            self.node.lose(thread_id, *epoch);
        }
        result
    }

    /// Takes (or takes again: a resume) the lease of `thread` for this node and holds
    /// it, so that every later write of the thread is fenced by it (SCALE-04). Take it
    /// before writing the thread's claim.
    ///
    /// Errors: [`StoreError::LeaseHeld`] (another node runs the thread),
    /// [`StoreError::Database`].
    pub async fn hold_lease(&self, thread: &ThreadId) -> Result<Lease, StoreError> {
        let lease = self
            .backend
            .acquire_lease(thread, self.node.node(), self.node.ttl())
            .await?;
        self.node.hold(lease.clone());
        Ok(lease)
    }

    /// Holds a lease this node took over ([`Leases::take_expired_leases`]).
    pub fn adopt_lease(&self, lease: Lease) {
        self.node.hold(lease);
    }

    /// Gives up this node's lease of `thread` (its claim was released): forgotten here,
    /// expired in the database. No-op when none is held.
    ///
    /// Errors: [`StoreError::Database`] (the lease then simply runs out).
    pub async fn let_go(&self, thread: &ThreadId) -> Result<(), StoreError> {
        match self.node.forget(thread) {
            Some(lease) => self.backend.release_lease(&lease).await,
            None => Ok(()),
        }
    }

    /// Renews every lease this node holds (the heartbeat, every third of the lease).
    /// Returns the threads whose lease was lost since the last call (a renewal or a
    /// write was fenced: their work must stop) and the renewals that failed otherwise
    /// (kept; retried at the next beat).
    pub async fn renew_held_leases(&self) -> (Vec<ThreadId>, Vec<(ThreadId, StoreError)>) {
        let mut failed = Vec::new();
        for lease in self.node.all() {
            match self.backend.renew_lease(&lease, self.node.ttl()).await {
                // Only if it was not replaced meanwhile (a resume took a new epoch).
                Ok(renewed) => self.node.renewed(renewed),
                Err(StoreError::Fenced { .. }) => {
                    self.node.lose(&lease.thread_id, lease.epoch);
                }
                Err(e) => failed.push((lease.thread_id, e)),
            }
        }
        (self.node.take_newly_lost(), failed)
    }

    /// [`ProjectionReads::thread_projection`]; inherent for the same reason as
    /// [`Store::write`].
    pub async fn thread_projection(
        &self,
        id: &ThreadId,
    ) -> Result<Option<ThreadProjection>, StoreError> {
        self.backend.thread_projection(id).await
    }
}

impl std::ops::Deref for Store {
    type Target = dyn StoreBackend;

    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}
