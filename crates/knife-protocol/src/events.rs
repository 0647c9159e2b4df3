//! The domain event log: what knife appends to SQLite and streams to clients.
//! Each event carries a whole entity (upsert by id); projections are a fold of them.

use crate::Timestamp;
use crate::entities::*;
use crate::ids::*;
use serde::{Deserialize, Serialize};

/// One entry of the event log, before it has a sequence number.
///
/// JSON shape: `{"id", "thread_id", "run_id", "occurred_at", "type": "run.updated", "payload": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DomainEvent {
    pub id: EventId,
    /// The thread this event belongs to; `None` for project-level and unbound session events.
    pub thread_id: Option<ThreadId>,
    pub run_id: Option<RunId>,
    pub occurred_at: Timestamp,
    #[serde(flatten)]
    pub body: EventBody,
}

impl DomainEvent {
    /// A new event with a fresh id, stamped `occurred_at`; `thread_id` and `run_id`
    /// are taken from the payload where it names them.
    pub fn new(occurred_at: Timestamp, body: EventBody) -> Self {
        let (thread_id, run_id) = body.scope();
        Self {
            id: EventId::new(),
            thread_id,
            run_id,
            occurred_at,
            body,
        }
    }

    /// Files the event under `thread` when its payload names no thread (session-level
    /// events: `provider-session.*` bind to / unbind from this thread).
    pub fn with_thread(mut self, thread: &ThreadId) -> Self {
        if self.thread_id.is_none() {
            self.thread_id = Some(thread.clone());
        }
        self
    }

    /// The event type string stored in the `events.type` column (`run.updated`, …).
    pub fn event_type(&self) -> &'static str {
        self.body.event_type()
    }
}

/// Every event `type` string ([`EventBody::event_type`]), in declaration order: the
/// valid values of the `type` filter of the event stream API.
pub const EVENT_TYPES: &[&str] = &[
    "project.created",
    "project.updated",
    "thread.created",
    "thread.updated",
    "thread.deleted",
    "run.created",
    "run.updated",
    "node.updated",
    "provider-session.attached",
    "provider-session.updated",
    "provider-session.detached",
    "provider-thread.updated",
    "provider-turn.updated",
    "runtime-request.updated",
    "turn-item.updated",
    "thread.status",
    "thread.error",
];

/// The payload of a domain event, tagged by its type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum EventBody {
    #[serde(rename = "project.created")]
    ProjectCreated(Project),
    #[serde(rename = "project.updated")]
    ProjectUpdated(Project),
    #[serde(rename = "thread.created")]
    ThreadCreated(Thread),
    #[serde(rename = "thread.updated")]
    ThreadUpdated(Thread),
    /// The tombstone of a deleted thread (CHG-08): the fold drops the thread and every
    /// row of it from the projections, and ignores the thread's later events;
    /// `knife db purge` removes the thread's events for good.
    #[serde(rename = "thread.deleted")]
    ThreadDeleted {
        thread_id: ThreadId,
        deleted_at: Timestamp,
    },
    #[serde(rename = "run.created")]
    RunCreated(Run),
    #[serde(rename = "run.updated")]
    RunUpdated(Run),
    #[serde(rename = "node.updated")]
    NodeUpdated(Node),
    /// Upserts the session and binds it to the event's thread.
    #[serde(rename = "provider-session.attached")]
    ProviderSessionAttached(ProviderSession),
    /// Upserts the session; creates no binding.
    #[serde(rename = "provider-session.updated")]
    ProviderSessionUpdated(ProviderSession),
    /// Removes the binding of the session to the event's thread.
    #[serde(rename = "provider-session.detached")]
    ProviderSessionDetached {
        provider_session_id: ProviderSessionId,
        detached_at: Timestamp,
        reason: Option<String>,
    },
    #[serde(rename = "provider-thread.updated")]
    ProviderThreadUpdated(ProviderThread),
    #[serde(rename = "provider-turn.updated")]
    ProviderTurnUpdated(ProviderTurn),
    #[serde(rename = "runtime-request.updated")]
    RuntimeRequestUpdated(RuntimeRequest),
    #[serde(rename = "turn-item.updated")]
    TurnItemUpdated(TurnItem),
    /// The agent's live status on the thread (PROC-06); sets `Thread::agent_status`.
    #[serde(rename = "thread.status")]
    ThreadStatusChanged {
        thread_id: ThreadId,
        run_id: Option<RunId>,
        status: AgentStatus,
    },
    /// A named agent error on the thread (PROC-04, PROC-09); changes no projection.
    #[serde(rename = "thread.error")]
    ThreadErrorRaised {
        thread_id: ThreadId,
        run_id: Option<RunId>,
        error: AgentError,
    },
    /// An `/mcp` tool call made with the thread's credential (issue 6); changes no
    /// projection.
    #[serde(rename = "mcp.tool_called")]
    McpToolCalled(crate::McpToolCall),
}

impl EventBody {
    /// The `type` string of this body, as stored and streamed.
    pub fn event_type(&self) -> &'static str {
        match self {
            EventBody::ProjectCreated(_) => "project.created",
            EventBody::ProjectUpdated(_) => "project.updated",
            EventBody::ThreadCreated(_) => "thread.created",
            EventBody::ThreadUpdated(_) => "thread.updated",
            EventBody::ThreadDeleted { .. } => "thread.deleted",
            EventBody::RunCreated(_) => "run.created",
            EventBody::RunUpdated(_) => "run.updated",
            EventBody::NodeUpdated(_) => "node.updated",
            EventBody::ProviderSessionAttached(_) => "provider-session.attached",
            EventBody::ProviderSessionUpdated(_) => "provider-session.updated",
            EventBody::ProviderSessionDetached { .. } => "provider-session.detached",
            EventBody::ProviderThreadUpdated(_) => "provider-thread.updated",
            EventBody::ProviderTurnUpdated(_) => "provider-turn.updated",
            EventBody::RuntimeRequestUpdated(_) => "runtime-request.updated",
            EventBody::TurnItemUpdated(_) => "turn-item.updated",
            EventBody::ThreadStatusChanged { .. } => "thread.status",
            EventBody::ThreadErrorRaised { .. } => "thread.error",
            EventBody::McpToolCalled(_) => "mcp.tool_called",
        }
    }

    /// Thread and run named by the payload itself (None where the entity has no thread).
    fn scope(&self) -> (Option<ThreadId>, Option<RunId>) {
        match self {
            EventBody::ProjectCreated(_) | EventBody::ProjectUpdated(_) => (None, None),
            EventBody::ThreadCreated(t) | EventBody::ThreadUpdated(t) => (Some(t.id.clone()), None),
            EventBody::ThreadDeleted { thread_id, .. } => (Some(thread_id.clone()), None),
            EventBody::RunCreated(r) | EventBody::RunUpdated(r) => {
                (Some(r.thread_id.clone()), Some(r.id.clone()))
            }
            EventBody::NodeUpdated(n) => (Some(n.thread_id.clone()), n.run_id.clone()),
            EventBody::ProviderSessionAttached(_)
            | EventBody::ProviderSessionUpdated(_)
            | EventBody::ProviderSessionDetached { .. } => (None, None),
            EventBody::ProviderThreadUpdated(p) => (p.app_thread_id.clone(), None),
            EventBody::ProviderTurnUpdated(t) => {
                (Some(t.thread_id.clone()), Some(t.run_id.clone()))
            }
            EventBody::RuntimeRequestUpdated(r) => (Some(r.thread_id.clone()), r.run_id.clone()),
            EventBody::TurnItemUpdated(i) => (Some(i.thread_id.clone()), i.run_id.clone()),
            EventBody::ThreadStatusChanged {
                thread_id, run_id, ..
            }
            | EventBody::ThreadErrorRaised {
                thread_id, run_id, ..
            } => (Some(thread_id.clone()), run_id.clone()),
            EventBody::McpToolCalled(c) => (Some(c.thread_id.clone()), None),
        }
    }
}

/// An event as stored: its position in the log plus the event.
///
/// `sequence` is global, strictly increasing and gap-free per commit order (SQLite
/// `INTEGER PRIMARY KEY AUTOINCREMENT`). JSON: the event's fields plus `"sequence"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub sequence: u64,
    #[serde(flatten)]
    pub event: DomainEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_json_round_trips_with_type_and_payload() {
        let now = chrono::Utc::now();
        let project = Project {
            id: ProjectId::from("project_1"),
            name: "demo".into(),
            root: "/tmp/demo".into(),
            created_at: now,
            updated_at: now,
        };
        let ev = StoredEvent {
            sequence: 7,
            event: DomainEvent::new(now, EventBody::ProjectCreated(project)),
        };
        let json = serde_json::to_value(&ev).unwrap_or_default();
        assert_eq!(json["type"], "project.created");
        assert_eq!(json["sequence"], 7);
        assert_eq!(json["payload"]["name"], "demo");
        let back: StoredEvent = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, ev);
        assert_eq!(back.event.event_type(), "project.created");
    }
}
