// Leases and fencing (SPEC.md SCALE-04/05): which node runs a claimed thread's work now,
// until when (the database's clock), and the epoch every write for that thread is fenced by.

//! The lease contract (docs/2026-12-01-leases.md).
//!
//! A thread's *claim* (its `claimed_at`, an event-log fact) says "this work must be
//! finished"; its *lease* (an operational row, not an event: renewals every few seconds
//! must not flood the log) says which node runs it now, until when, under which epoch.
//!
//! * Times come from the database's clock (PostgreSQL `clock_timestamp()`; SQLite: the
//!   one machine's clock), so a node with a skewed clock cannot steal a live lease.
//! * The epoch of a thread's lease only grows: every acquisition (a first run, a resume
//!   on the same node, a takeover by another node) is the previous epoch + 1, also
//!   after a release (the row is kept, expired, for that reason).
//! * [`Leases::write_fenced`] appends only while the thread's lease is still at the
//!   caller's node and epoch, checked inside the append's transaction: a node that lost
//!   the lease (it was paused or partitioned past the expiry and another node took the
//!   thread over) gets [`StoreError::Fenced`] and nothing of its batch is written.
//!   An expired lease nobody took over yet still fences correctly: its epoch is
//!   unchanged, so the late write is the only writer and is accepted.

use crate::error::StoreError;
use crate::types::RowGuard;
use knife_protocol::{DomainEvent, StoredEvent, ThreadId, Timestamp};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Default lease length (SPEC SCALE-04): 10 s.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// Default heartbeat (renewal) interval (SPEC SCALE-04): 3 s.
pub const DEFAULT_LEASE_HEARTBEAT: Duration = Duration::from_secs(3);

/// One node's lease on one claimed thread. The value a node keeps and passes back to
/// [`Leases::renew_lease`], [`Leases::release_lease`] and [`Leases::write_fenced`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The leased thread.
    pub thread_id: ThreadId,
    /// The node holding it (its `--node-id`; `local` for a single SQLite node).
    pub node: String,
    /// Grows by 1 with every acquisition of this thread's lease (never reused).
    pub epoch: u64,
    /// When it expires unless renewed, on the database's clock.
    pub expires_at: Timestamp,
}

/// What [`Leases::take_expired_leases`] may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakeScope {
    /// Leases that expired (or claimed threads that never had one): a node's periodic
    /// takeover sweep.
    Expired,
    /// Also the live leases of the taking node itself: a restarted node taking back
    /// what its previous process held (it checked that process is gone).
    ExpiredOrOwn,
}

/// Leases and fenced writes (SPEC SCALE-04, SCALE-05).
#[async_trait::async_trait]
pub trait Leases: Send + Sync {
    /// Takes the lease of `thread` for `node` for `ttl` from now (database clock):
    /// granted when the thread has no lease, when it expired, or when `node` holds it
    /// already (a resume on the same node); the epoch is then the previous one + 1
    /// (1 for the first). The thread need not be claimed yet: a node takes the lease
    /// before it writes the claim, so that write is fenced too.
    ///
    /// Errors: [`StoreError::LeaseHeld`] when another node holds a live lease;
    /// [`StoreError::Database`].
    async fn acquire_lease(
        &self,
        thread: &ThreadId,
        node: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError>;

    /// Extends `lease` to `ttl` from now (the heartbeat) and returns it with its new
    /// expiry. Also renews an expired lease nobody took over (same epoch: no other
    /// writer existed).
    ///
    /// Errors: [`StoreError::Fenced`] when the thread's lease moved on (another epoch
    /// or node): the caller must stop working on the thread; [`StoreError::Database`].
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError>;

    /// Gives `lease` up (its work ended or the node stops): the row stays with its
    /// epoch, expired now, so the next acquisition gets a higher epoch. A lease that
    /// moved on already is left alone (`Ok`).
    ///
    /// Errors: [`StoreError::Database`].
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError>;

    /// The thread's lease row (live or expired), `None` when it never had one.
    async fn get_lease(&self, thread: &ThreadId) -> Result<Option<Lease>, StoreError>;

    /// Every lease that has not expired (database clock), by thread id: what a node
    /// starting next to live nodes must leave alone at its boot reconciliation.
    async fn live_leases(&self) -> Result<Vec<Lease>, StoreError>;

    /// Takes over up to `limit` claimed top-level threads (claim set, no parent) whose
    /// lease expired or who never had one (and, with [`TakeScope::ExpiredOrOwn`], those
    /// `node` holds), oldest claim first, each for `node` for `ttl` with epoch + 1.
    /// Concurrent takers (several nodes sweeping at once) each get a disjoint set: a
    /// thread is taken by exactly one of them (PostgreSQL: `FOR UPDATE SKIP LOCKED`).
    /// Threads in `exclude` are never taken (a node leaves the threads whose workspace
    /// it does not have to the nodes that have it, SPEC SCALE-08).
    ///
    /// Errors: [`StoreError::Database`].
    async fn take_expired_leases(
        &self,
        node: &str,
        ttl: Duration,
        scope: TakeScope,
        limit: usize,
        exclude: &[ThreadId],
    ) -> Result<Vec<Lease>, StoreError>;

    /// [`crate::EventLog::write_if`] (or `write` when `guard` is `None`) fenced by
    /// `leases`: inside the append's transaction, each lease's thread must still be
    /// leased at that lease's node and epoch. `Ok(None)` is a guard conflict, as for
    /// `write_if`.
    ///
    /// Errors: [`StoreError::Fenced`] (nothing written or published; stop working on
    /// the thread, do not retry), and those of [`crate::EventLog::write`].
    async fn write_fenced(
        &self,
        leases: &[Lease],
        guard: Option<RowGuard>,
        events: Vec<DomainEvent>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError>;
}

/// Microseconds since the epoch of a lease expiry, as stored.
pub fn to_micros(at: Timestamp) -> i64 {
    at.timestamp_micros()
}

/// A stored expiry back to a timestamp (out-of-range values clamp to the epoch).
pub fn from_micros(us: i64) -> Timestamp {
    chrono::DateTime::from_timestamp_micros(us).unwrap_or_default()
}

/// `ttl` in microseconds (saturating; a lease of more than 292,000 years is forever).
pub fn ttl_micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

/// A stored epoch (BIGINT, never negative) as the contract's `u64`.
pub fn epoch_u64(epoch: i64) -> u64 {
    u64::try_from(epoch).unwrap_or(0)
}

/// A contract epoch as stored (BIGINT).
pub fn epoch_i64(epoch: u64) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}
