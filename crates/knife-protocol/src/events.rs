//! The domain event log: what knife appends to SQLite and streams to clients.
//! Each event carries a whole entity (upsert by id), except the appended text of a
//! streaming item (`turn-item.appended`, LIVE-03); projections are a fold of them.

use crate::Timestamp;
use crate::entities::*;
use crate::ids::*;
use serde::{Deserialize, Serialize};

/// One entry of the event log, before it has a sequence number.
///
/// JSON shape: `{"id", "thread_id", "run_id", "occurred_at", "type": "run.updated", "payload": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DomainEvent {
    /// Event id, `event_<uuid v7>`; unique in the log.
    pub id: EventId,
    /// The thread this event belongs to; `None` for project-level and unbound session events.
    pub thread_id: Option<ThreadId>,
    /// The run it belongs to; `None` for events outside any run.
    pub run_id: Option<RunId>,
    /// When the writer stamped it (the writing node's clock).
    pub occurred_at: Timestamp,
    /// `type` and `payload` (flattened beside these fields).
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

/// Declares [`EventBody`] from one list of `"type" => Variant(payload)` lines and
/// derives the three things that must agree from it: the serde tag of each variant,
/// [`EventBody::event_type`] and [`EVENT_TYPES`]. Each type string is written once.
macro_rules! event_bodies {
    (
        $(#[$enum_meta:meta])*
        pub enum $name:ident {
            $(
                $(#[$meta:meta])*
                $type:literal => $variant:ident $( ( $payload:ty ) )? $( { $($(#[$fmeta:meta])* $field:ident : $fty:ty),* $(,)? } )?
            ),* $(,)?
        }
    ) => {
        $(#[$enum_meta])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(tag = "type", content = "payload")]
        pub enum $name {
            $(
                $(#[$meta])*
                #[serde(rename = $type)]
                $variant $( ( $payload ) )? $( { $($(#[$fmeta])* $field : $fty),* } )?,
            )*
        }

        /// Every event `type` string ([`EventBody::event_type`]), in declaration order: the
        /// valid values of the `type` filter of the event stream API.
        pub const EVENT_TYPES: &[&str] = &[$($type),*];

        impl $name {
            /// The `type` string of this body, as stored and streamed.
            pub fn event_type(&self) -> &'static str {
                match self {
                    $( $name::$variant { .. } => $type, )*
                }
            }
        }
    };
}

event_bodies! {
    /// The payload of a domain event, tagged by its type.
    pub enum EventBody {
        /// A project was registered (`POST /api/projects` on a new folder).
        "project.created" => ProjectCreated(Project),
        /// A project row changed (whole row).
        "project.updated" => ProjectUpdated(Project),
        /// A thread was created (`POST /api/threads`, a fork).
        "thread.created" => ThreadCreated(Thread),
        /// A thread row changed (whole row: run start and end, claim, queue, rename,
        /// archive, budget raise…).
        "thread.updated" => ThreadUpdated(Thread),
        /// The tombstone of a deleted thread (CHG-08): the fold drops the thread and every
        /// row of it from the projections, and ignores the thread's later events;
        /// `knife db purge` removes the thread's events for good.
        "thread.deleted" => ThreadDeleted {
            /// The deleted thread.
            thread_id: ThreadId,
            /// When it was deleted.
            deleted_at: Timestamp,
        },
        /// A run was started (same transaction as the thread's claim, EXEC-04).
        "run.created" => RunCreated(Run),
        /// A run changed (whole row: status, usage, checkpoints, changes).
        "run.updated" => RunUpdated(Run),
        /// A node of a run's work tree changed (whole row).
        "node.updated" => NodeUpdated(Node),
        /// Upserts the session and binds it to the event's thread.
        "provider-session.attached" => ProviderSessionAttached(ProviderSession),
        /// Upserts the session; creates no binding.
        "provider-session.updated" => ProviderSessionUpdated(ProviderSession),
        /// Removes the binding of the session to the event's thread.
        "provider-session.detached" => ProviderSessionDetached {
            /// The session unbound from the event's thread.
            provider_session_id: ProviderSessionId,
            /// When it was unbound.
            detached_at: Timestamp,
            /// Why, for people (the detach detail, or the reaper's mark); `None` when not given.
            reason: Option<String>,
        },
        /// A provider thread changed (whole row, compare-and-set for the roster, MGR-47).
        "provider-thread.updated" => ProviderThreadUpdated(ProviderThread),
        /// A provider turn (run attempt) changed (whole row).
        "provider-turn.updated" => ProviderTurnUpdated(ProviderTurn),
        /// One model call's token usage (TURN-06): a row of `model_calls`, from which
        /// usage totals and budget sums are computed.
        "model-call.recorded" => ModelCallRecorded(crate::ModelCall),
        /// A runtime request was raised, answered, expired or cancelled (whole row).
        "runtime-request.updated" => RuntimeRequestUpdated(RuntimeRequest),
        /// A durable snapshot of a transcript item (whole item; PROC-12 throttles them).
        "turn-item.updated" => TurnItemUpdated(TurnItem),
        /// Text appended to a streaming item's field since its previous durable state
        /// (LIVE-03); the fold appends it to the `turn_items` row. The item's first and
        /// settled states stay whole `turn-item.updated` snapshots.
        "turn-item.appended" => TurnItemAppended(crate::live::TurnItemAppend),
        /// The agent's live status on the thread (PROC-06); sets `Thread::agent_status`.
        "thread.status" => ThreadStatusChanged {
            /// The thread whose agent status changed.
            thread_id: ThreadId,
            /// The run the agent works on; `None` between runs.
            run_id: Option<RunId>,
            /// The new status.
            status: AgentStatus,
        },
        /// A named agent error on the thread (PROC-04, PROC-09); changes no projection.
        "thread.error" => ThreadErrorRaised {
            /// The thread whose agent hit the error.
            thread_id: ThreadId,
            /// The run that hit it; `None` outside a run.
            run_id: Option<RunId>,
            /// The named error.
            error: AgentError,
        },
        /// An `/mcp` tool call made with the thread's credential (the `/mcp`
        /// endpoint's audit record); changes no projection.
        "mcp.tool_called" => McpToolCalled(crate::McpToolCall),
        /// A checkpoint of a thread's working tree, or why none could be taken
        /// (CHG-01/02/04); changes no projection (the run's own `run.updated` carries it).
        "checkpoint.recorded" => CheckpointRecorded(crate::CheckpointRecord),
        /// A revert of a thread's files, whole (CHG-04); the revert journal (CHG-10).
        /// Changes no projection table: reverts are read back from the log by type.
        "revert.updated" => RevertUpdated(crate::Revert),
        /// A command for the node driving a run (SCALE-06: an interrupt, a steer or an
        /// approval answer sent to another node); changes no projection.
        "thread.command" => ThreadCommanded(crate::ThreadCommand),
        /// What the node driving the run did with a `thread.command` (SCALE-06);
        /// changes no projection.
        "thread.command_applied" => ThreadCommandApplied(crate::ThreadCommandApplied),
        /// A command for the node running a provider session (SCALE-06: closing it
        /// from another node); changes no projection.
        "session.command" => SessionCommanded(crate::SessionCommand),
        /// What the node running the session did with a `session.command` (SCALE-06);
        /// changes no projection.
        "session.command_applied" => SessionCommandApplied(crate::SessionCommandApplied),
    }
}

impl EventBody {
    /// Thread and run named by the payload itself (None where the entity has no thread).
    fn scope(&self) -> (Option<ThreadId>, Option<RunId>) {
        match self {
            EventBody::ProjectCreated(_) | EventBody::ProjectUpdated(_) => (None, None),
            EventBody::ThreadCreated(t) | EventBody::ThreadUpdated(t) => (Some(t.id.clone()), None),
            EventBody::ThreadDeleted { thread_id, .. } => (Some(thread_id.clone()), None),
            EventBody::CheckpointRecorded(c) => (Some(c.thread_id.clone()), c.run_id.clone()),
            EventBody::RevertUpdated(r) => (Some(r.thread_id.clone()), None),
            EventBody::RunCreated(r) | EventBody::RunUpdated(r) => {
                (Some(r.thread_id.clone()), Some(r.id.clone()))
            }
            EventBody::NodeUpdated(n) => (Some(n.thread_id.clone()), n.run_id.clone()),
            EventBody::ProviderSessionAttached(_)
            | EventBody::ProviderSessionUpdated(_)
            | EventBody::ProviderSessionDetached { .. }
            | EventBody::SessionCommanded(_)
            | EventBody::SessionCommandApplied(_) => (None, None),
            EventBody::ProviderThreadUpdated(p) => (p.app_thread_id.clone(), None),
            EventBody::ProviderTurnUpdated(t) => {
                (Some(t.thread_id.clone()), Some(t.run_id.clone()))
            }
            EventBody::ModelCallRecorded(c) => (Some(c.thread_id.clone()), Some(c.run_id.clone())),
            EventBody::RuntimeRequestUpdated(r) => (Some(r.thread_id.clone()), r.run_id.clone()),
            EventBody::TurnItemUpdated(i) => (Some(i.thread_id.clone()), i.run_id.clone()),
            EventBody::TurnItemAppended(c) => (Some(c.thread_id.clone()), c.run_id.clone()),
            EventBody::ThreadStatusChanged {
                thread_id, run_id, ..
            }
            | EventBody::ThreadErrorRaised {
                thread_id, run_id, ..
            } => (Some(thread_id.clone()), run_id.clone()),
            EventBody::McpToolCalled(c) => (Some(c.thread_id.clone()), None),
            EventBody::ThreadCommanded(c) => (Some(c.thread_id.clone()), Some(c.run_id.clone())),
            EventBody::ThreadCommandApplied(a) => {
                (Some(a.thread_id.clone()), Some(a.run_id.clone()))
            }
        }
    }
}

/// An event as stored: its position in the log plus the event.
///
/// `sequence` is global, strictly increasing and gap-free per commit order (SQLite
/// `INTEGER PRIMARY KEY AUTOINCREMENT`). JSON: the event's fields plus `"sequence"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoredEvent {
    /// Position in the whole log, from 1; strictly increasing, gap-free in commit order.
    pub sequence: u64,
    /// The event (flattened beside `sequence`).
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

    /// The variant names serde knows, read from its "unknown variant" message (which
    /// lists every tag it accepts).
    fn serde_variant_names() -> Vec<String> {
        let err = serde_json::from_value::<EventBody>(serde_json::json!({
            "type": "no.such.type",
            "payload": null
        }))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        let list = err.split("expected one of ").nth(1).unwrap_or_default();
        list.split(", ")
            .map(|name| name.trim().trim_matches('`').to_owned())
            .filter(|name| !name.is_empty())
            .collect()
    }

    #[test]
    fn every_serialized_event_type_is_in_event_types() {
        let serde_names = serde_variant_names();
        assert_eq!(serde_names.len(), EVENT_TYPES.len(), "{serde_names:?}");
        for name in &serde_names {
            assert!(
                EVENT_TYPES.contains(&name.as_str()),
                "{name} missing from EVENT_TYPES"
            );
        }
        assert!(EVENT_TYPES.contains(&"mcp.tool_called"));
    }

    #[test]
    fn event_type_matches_the_serialized_type() {
        let now = chrono::Utc::now();
        let call = crate::McpToolCall {
            thread_id: ThreadId::from("thread_1"),
            tool: "thread_send_message".into(),
            arguments: "{}".into(),
            target_thread_id: None,
            ok: true,
            error: None,
        };
        for body in [
            EventBody::McpToolCalled(call),
            EventBody::ProviderSessionDetached {
                provider_session_id: ProviderSessionId::from("ps_1"),
                detached_at: now,
                reason: None,
            },
        ] {
            let json = serde_json::to_value(&body).unwrap_or_default();
            assert_eq!(json["type"], body.event_type());
            assert!(EVENT_TYPES.contains(&body.event_type()));
        }
    }
}
