// Plain value types of the store API: stream filters, projection row kinds and
// compare-and-set guards, rebuild statistics and open options.

use knife_protocol::{StoredEvent, ThreadId};
use std::time::Duration;

/// Which events [`crate::Store::stream`] and [`crate::Store::read_events`] return.
///
/// All conditions are ANDed; `Default` is "every event from the start".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamFilter {
    /// Only events whose envelope `thread_id` is this thread (events without a
    /// thread, e.g. `project.created`, never match a thread filter).
    pub thread_id: Option<ThreadId>,
    /// Only events with `sequence > after` (0 = from the first event).
    pub after: u64,
    /// Only events of this type string (`"run.updated"`, `"turn-item.updated"`, ...).
    pub event_type: Option<String>,
}

impl StreamFilter {
    /// Every event with `sequence > after`.
    pub fn after(after: u64) -> Self {
        Self {
            after,
            ..Self::default()
        }
    }

    /// Events of `thread` with `sequence > after`.
    pub fn thread(thread: ThreadId, after: u64) -> Self {
        Self {
            thread_id: Some(thread),
            after,
            event_type: None,
        }
    }

    /// True when `event` passes the thread and type conditions (`after` is not checked).
    pub fn matches(&self, event: &StoredEvent) -> bool {
        self.thread_id
            .as_ref()
            .is_none_or(|t| event.event.thread_id.as_ref() == Some(t))
            && self
                .event_type
                .as_deref()
                .is_none_or(|ty| event.event.event_type() == ty)
    }
}

/// A projection table holding one entity per row (by id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntityKind {
    /// `projects` (from `project.created` / `project.updated`).
    Project,
    /// `threads` (from `thread.created` / `thread.updated`).
    Thread,
    /// `runs` (from `run.created` / `run.updated`).
    Run,
    /// `nodes` (from `node.updated`).
    Node,
    /// `provider_sessions` (from `provider-session.attached` / `.updated`).
    ProviderSession,
    /// `provider_threads` (from `provider-thread.updated`).
    ProviderThread,
    /// `provider_turns` (from `provider-turn.updated`).
    ProviderTurn,
    /// `runtime_requests` (from `runtime-request.updated`).
    RuntimeRequest,
    /// `turn_items` (from `turn-item.updated`).
    TurnItem,
}

impl EntityKind {
    /// Every kind, in table order.
    pub const ALL: [EntityKind; 9] = [
        EntityKind::Project,
        EntityKind::Thread,
        EntityKind::Run,
        EntityKind::Node,
        EntityKind::ProviderSession,
        EntityKind::ProviderThread,
        EntityKind::ProviderTurn,
        EntityKind::RuntimeRequest,
        EntityKind::TurnItem,
    ];

    /// The SQLite table of this kind (`threads`, `provider_sessions`, ...).
    pub fn table(self) -> &'static str {
        match self {
            EntityKind::Project => "projects",
            EntityKind::Thread => "threads",
            EntityKind::Run => "runs",
            EntityKind::Node => "nodes",
            EntityKind::ProviderSession => "provider_sessions",
            EntityKind::ProviderThread => "provider_threads",
            EntityKind::ProviderTurn => "provider_turns",
            EntityKind::RuntimeRequest => "runtime_requests",
            EntityKind::TurnItem => "turn_items",
        }
    }
}

/// The condition of a compare-and-set write ([`crate::Store::write_if`], MGR-47):
/// the row `(kind, id)` must be at `expected_version` when the write transaction
/// re-reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowGuard {
    /// The projection table of the guarded row.
    pub kind: EntityKind,
    /// The row's entity id (e.g. a `ProviderThreadId` as a string).
    pub id: String,
    /// The version read earlier with [`crate::Store::row_version`]; `None` means
    /// "the row must not exist yet".
    pub expected_version: Option<i64>,
}

impl RowGuard {
    /// Guard on row `(kind, id)` being at `expected_version` (`None` = absent).
    pub fn new(kind: EntityKind, id: impl Into<String>, expected_version: Option<i64>) -> Self {
        Self {
            kind,
            id: id.into(),
            expected_version,
        }
    }
}

/// What [`crate::Store::rebuild`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebuildStats {
    /// Number of events folded into the fresh projections.
    pub events: u64,
    /// Wall time of the rebuild (measured with `tokio::time::Instant`).
    pub elapsed: Duration,
}

/// Tuning knobs of [`crate::Store::open_with`]; `Default` is what `open` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Read-only connections in the read pool (default 4, at least 1).
    pub readers: usize,
    /// Capacity of the live feed, in events (default 4096). A stream that falls
    /// further behind recovers from the table (see [`crate::Store::stream`]); this only
    /// bounds memory, never correctness.
    pub live_capacity: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            readers: 4,
            live_capacity: 4096,
        }
    }
}
