// Cluster membership and singletons (SPEC.md SCALE-05, SCALE-07): which node ids are live
// (a heartbeat row per node, the database's clock) and which node runs a cluster singleton.

//! The membership contract (docs/2026-12-01-leases.md, "Nodes and singletons").
//!
//! * A node **joins** under its id before it touches anything of the previous process:
//!   [`Cluster::join_cluster`] refuses an id whose row another place (host + data
//!   directory) still heartbeats ([`StoreError::NodeIdLive`]); the caller waits the row
//!   out once and refuses to start if the heartbeat moved meanwhile (a live process).
//!   The same place taking its id back is granted at once: the caller holds that data
//!   directory's lock, so the process that wrote the row is gone.
//! * A **singleton** (the cluster part of the session reaper) is a named row held by one
//!   node until it expires unless renewed ([`Cluster::hold_singleton`]).
//!
//! Operational rows, not events: `rebuild` leaves them alone. Times: the database's
//! clock (PostgreSQL `clock_timestamp()`; SQLite, one node: the machine's).

use crate::error::StoreError;
use knife_protocol::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A node's membership row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMember {
    /// The node id (`[store] node_id`; `local` by default).
    pub node: String,
    /// Where the process runs: `<host>:<data directory>`. A process at the same place
    /// holds that data directory's lock, so it may take the id back at once.
    pub location: String,
    /// A random id of the process that wrote the row (one per start).
    pub instance: String,
    /// When that process joined (database clock).
    pub joined_at: Timestamp,
    /// When the row expires unless heartbeated (database clock).
    pub expires_at: Timestamp,
}

/// Membership of the nodes sharing one database, and cluster singletons.
#[async_trait::async_trait]
pub trait Cluster: Send + Sync {
    /// Joins as `node` from `location` as process `instance`, live for `ttl` (database
    /// clock). Granted when the id has no row, when its row expired, or when the row
    /// is at the same `location` (the previous process there is gone: the caller holds
    /// its data-directory lock) or the same `instance` (a retry).
    ///
    /// Errors: [`StoreError::NodeIdLive`] with the live row (another place heartbeats
    /// this id; wait until `expires_at` and join again: a row whose expiry moved on
    /// belongs to a live process); [`StoreError::Database`].
    async fn join_cluster(
        &self,
        node: &str,
        location: &str,
        instance: &str,
        ttl: Duration,
    ) -> Result<NodeMember, StoreError>;

    /// Extends this process's row to `ttl` from now (the heartbeat), also when it had
    /// expired and nobody joined meanwhile.
    ///
    /// Errors: [`StoreError::NodeIdLive`] when another process joined under the id (its
    /// row); [`StoreError::Database`].
    async fn heartbeat_node(
        &self,
        node: &str,
        instance: &str,
        ttl: Duration,
    ) -> Result<NodeMember, StoreError>;

    /// Leaves: expires this process's row now (a clean stop; the id is free at once).
    /// A row another process owns is left alone.
    async fn leave_cluster(&self, node: &str, instance: &str) -> Result<(), StoreError>;

    /// Every node whose row has not expired (database clock), by node id.
    async fn live_nodes(&self) -> Result<Vec<NodeMember>, StoreError>;

    /// Takes or renews singleton `name` for `node` for `ttl`: granted when nobody holds
    /// it, when it expired, or when `node` holds it. Returns whether `node` holds it
    /// now (`false`: another node's live hold).
    ///
    /// Errors: [`StoreError::Database`].
    async fn hold_singleton(
        &self,
        name: &str,
        node: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Gives singleton `name` up if `node` holds it (expired now), so another node
    /// takes it at its next try. Otherwise no-op.
    async fn release_singleton(&self, name: &str, node: &str) -> Result<(), StoreError>;
}
