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
//!   [`Activity`], [`Maintenance`]. [`StoreBackend`] is all of them.
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

mod error;
pub mod fold;
pub mod search;
mod stream;
mod traits;
mod types;

#[cfg(feature = "contract-tests")]
pub mod contract;

pub use error::{BackendError, StoreError};
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
}

impl Store {
    /// Wraps a backend (e.g. `knife_store_sqlite::SqliteStore`).
    pub fn new(backend: impl StoreBackend) -> Store {
        Store {
            backend: Arc::new(backend),
        }
    }

    /// Wraps a backend already behind an `Arc`.
    pub fn from_arc(backend: Arc<dyn StoreBackend>) -> Store {
        Store { backend }
    }

    /// The backend as a shared trait object.
    pub fn backend(&self) -> &Arc<dyn StoreBackend> {
        &self.backend
    }

    /// [`EventLog::write`]. Inherent so that it wins method resolution over traits of
    /// the same name implemented for `Store` elsewhere (knife-runtime's `SessionStore`).
    pub async fn write(&self, events: Vec<DomainEvent>) -> Result<Vec<StoredEvent>, StoreError> {
        self.backend.write(events).await
    }

    /// [`EventLog::write_if`]; inherent for the same reason as [`Store::write`].
    pub async fn write_if(
        &self,
        guard: RowGuard,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        self.backend.write_if(guard, events).await
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
