// Plain, backend-neutral value types of the store contract: stream filters, projection
// row kinds and compare-and-set guards, rebuild statistics, process groups, activity.

use knife_protocol::{ProviderSession, StoredEvent, ThreadId, Timestamp};
use std::time::Duration;

/// Which events [`crate::EventFeed::stream`] and [`crate::EventFeed::read_events`] return.
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

    /// The projection table of this kind (the same name on every backend) (`threads`, `provider_sessions`, ...).
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

/// The condition of a compare-and-set write ([`crate::EventLog::write_if`], MGR-47):
/// the row `(kind, id)` must be at `expected_version` when the write transaction
/// re-reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowGuard {
    /// The projection table of the guarded row.
    pub kind: EntityKind,
    /// The row's entity id (e.g. a `ProviderThreadId` as a string).
    pub id: String,
    /// The version read earlier with [`crate::EventLog::row_version`]; `None` means
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

/// What [`crate::Maintenance::rebuild`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebuildStats {
    /// Number of events folded into the fresh projections.
    pub events: u64,
    /// Wall time of the rebuild (measured with `tokio::time::Instant`).
    pub elapsed: Duration,
}

/// A process group a knife server spawned (a tool command, an adapter process).
///
/// Recorded when spawned ([`crate::ProcessGroups::register_process_group`]), removed
/// when it ended ([`crate::ProcessGroups::unregister_process_group`]). Rows whose owner
/// is dead are leftovers of a crash: the next server kills those groups at boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessGroupRecord {
    /// The knife node that spawned it (SPEC SCALE-07; `local` on a single node): only
    /// that node ever signals it.
    pub node: String,
    /// Process group id (= pid of its leader) on that node's host.
    pub pgid: i32,
    /// pid of the knife server that spawned it.
    pub owner_pid: u32,
    /// Start time of the leader in clock ticks since boot (`/proc/<pid>/stat` field
    /// 22), to tell the original leader from a process that reused its pid; `None`
    /// when unknown.
    pub leader_start: Option<u64>,
    /// Thread the group works for, if any.
    pub thread_id: Option<ThreadId>,
    /// What it is, for logs (`bash: cargo test`, `codex app-server`).
    pub label: String,
    /// When it was recorded (microsecond precision is kept).
    pub registered_at: Timestamp,
}

/// One provider session bound to one thread, as the stale-session reaper sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionActivity {
    /// The session's projection row.
    pub session: ProviderSession,
    /// The thread the session is bound to.
    pub thread_id: ThreadId,
    /// When the session was last seen: the later of its last event's `updated_at`
    /// and the last [`crate::Activity::touch_provider_session`].
    pub last_seen_at: Timestamp,
    /// Whether that thread has an active run (an active turn).
    pub thread_has_active_run: bool,
}

/// What [`crate::Maintenance::purge_deleted_threads`] removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PurgeStats {
    /// Deleted threads whose events were removed (their ids, sorted).
    pub threads: Vec<String>,
    /// Events removed from the log (tombstones included).
    pub events: u64,
    /// Events left in the log, refolded into the projections.
    pub events_kept: u64,
    /// Wall time of the purge, vacuum included (`tokio::time::Instant`).
    pub elapsed: Duration,
}
