//! The runtime side of a thread: provider sessions (live runtimes), provider threads
//! (their native conversations) and provider turns (one run attempt on a runtime).

use super::{AgentError, TokenUsage};
use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};

/// Status of a provider session (one live runtime).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Being opened. Part of the wire shape: the manager writes a session row only
    /// once it is open, so knife does not write this status today.
    Starting,
    /// Open (what the manager projects after `open`); stays so while turns run.
    Ready,
    /// A turn is executing. Part of the wire shape; not written by knife today (busy
    /// turns are listed by `GET /api/sessions`' `busy_turns`).
    Running,
    /// A turn waits on a runtime request. Part of the wire shape; not written by knife
    /// today (the request itself is `pending`).
    Waiting,
    /// Released or closed (idle release, close, shutdown, reaper; MGR-20/30).
    Stopped,
    /// Released after a runtime failure; `ProviderSession::last_error` says why (MGR-30/31).
    Error,
}

/// What a runtime can do; declared by its adapter (SPEC.md MGR section).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderCapabilities {
    /// One session may serve several threads (shared) rather than one (exclusive, MGR-06).
    pub shared_sessions: bool,
    /// A running turn accepts extra user input (`steer_turn`).
    pub steer: bool,
    /// Background tasks may outlive the session's process (MGR-45).
    pub background_tasks_outlive_session: bool,
}

/// One live runtime of a provider instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderSession {
    /// Provider session id, `psession_<uuid v7>` (ending in `@<node>` on a
    /// non-`local` cluster node, SCALE-07); `POST /api/sessions/{id}/close` names it.
    pub id: ProviderSessionId,
    /// Driver kind: `builtin`, `codex`, `acp`, …
    pub driver: String,
    /// The configured provider instance (`knife.toml`) this runtime belongs to.
    pub provider_instance_id: ProviderInstanceId,
    /// Lifecycle status, as last projected by the session manager or the adapter.
    pub status: SessionStatus,
    /// Working directory (the project root or a worktree).
    pub cwd: String,
    /// Model the session was opened with; `None` = the runtime's default.
    pub model: Option<String>,
    /// What the runtime declared it can do.
    pub capabilities: ProviderCapabilities,
    /// When the session was opened.
    pub created_at: Timestamp,
    /// When its row last changed (status, model).
    pub updated_at: Timestamp,
    /// Why the session ended in `error` (the release detail, MGR-30); `None` otherwise.
    pub last_error: Option<String>,
}

/// Status of a provider thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderThreadStatus {
    /// Known but not loaded in any live runtime (unloaded after idling, MGR-14, or
    /// its session is gone); the next turn resumes it.
    NotLoaded,
    /// Loaded in a runtime, no turn running.
    Idle,
    /// Loaded and running a turn.
    Active,
    /// Archived by the runtime (part of the wire shape; knife does not set it today).
    Archived,
    /// Closed for good by the runtime (part of the wire shape; not set today).
    Closed,
    /// The runtime reported the conversation broken (part of the wire shape; not set today).
    Error,
}

/// Work a runtime keeps running after its turn ended (dev server, sub-agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PendingBackgroundTask {
    /// The runtime's own id of the task; the roster is keyed by it (MGR-46).
    pub task_id: String,
    /// What kind of work it is, in the runtime's words (`shell`, `subagent`…), if given.
    #[serde(default)]
    pub kind: Option<String>,
    /// Human description of the task, if the runtime gave one.
    #[serde(default)]
    pub description: Option<String>,
}

/// The runtime's native conversation backing an app thread on one provider session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderThread {
    /// Provider thread id (`pthread_…`).
    pub id: ProviderThreadId,
    /// Driver kind of the runtime holding it: `builtin`, `codex`, `acp`, …
    pub driver: String,
    /// The provider instance whose runtime holds it.
    pub provider_instance_id: ProviderInstanceId,
    /// The session it is loaded in; `None` while no live runtime holds it.
    pub provider_session_id: Option<ProviderSessionId>,
    /// The app thread it backs; `None` when not (yet) tied to one.
    pub app_thread_id: Option<ThreadId>,
    /// The runtime's own id for the conversation, when it has one.
    pub native_id: Option<String>,
    /// Whether it is loaded, and running a turn.
    pub status: ProviderThreadStatus,
    /// Ordinal of the last run executed on it; `None` before the first.
    pub last_run_ordinal: Option<u32>,
    /// Background work the runtime still reports for this conversation (MGR-15/24,
    /// MGR-44..47); empty when none.
    #[serde(default)]
    pub pending_background_tasks: Vec<PendingBackgroundTask>,
    /// When the provider thread was first recorded.
    pub created_at: Timestamp,
    /// When its row last changed.
    pub updated_at: Timestamp,
}

/// Status of a provider turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderTurnStatus {
    /// Recorded, not yet started by the runtime (not set by knife today: turns are
    /// recorded `running`).
    Pending,
    /// The runtime accepted it and is executing it.
    Running,
    /// Ended on its own.
    Completed,
    /// Stopped by an interrupt.
    Interrupted,
    /// Ended with an error (`error` names it for the built-in agent).
    Failed,
    /// Abandoned without an interrupt (part of the wire shape; not set today).
    Cancelled,
}

/// The runtime's execution of one run attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderTurn {
    /// Derived provider turn id, `provider-turn:<run>:<attempt>` ([`ProviderTurnId::for_run`]).
    pub id: ProviderTurnId,
    /// The app thread of the run.
    pub thread_id: ThreadId,
    /// The run this is an attempt of.
    pub run_id: RunId,
    /// The native conversation it ran in, when the runtime has one.
    pub provider_thread_id: Option<ProviderThreadId>,
    /// The session that executed it.
    pub provider_session_id: ProviderSessionId,
    /// The run's root node in its work tree ([`NodeId::root_of`]).
    pub node_id: NodeId,
    /// 1-based attempt number of the run.
    pub ordinal: u32,
    /// Where the attempt is in its lifecycle.
    pub status: ProviderTurnStatus,
    /// When the runtime was asked to start it.
    pub started_at: Timestamp,
    /// When it reached a terminal status; `None` while pending or running.
    pub completed_at: Option<Timestamp>,
    /// Tokens this attempt's model calls used, when the runtime reports usage.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// How the turn's assistant message ended in error, when it did
    /// (`MessageAbortedError`, `UnknownError`, …; PROC-04, PROC-09). Set by the
    /// built-in agent; `None` for a turn that completed or for other runtimes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentError>,
    /// The runtime's own id of this turn, when it has one (codex's turn id): what a
    /// native fork after this run names as its last turn (CHG-09).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_turn_id: Option<String>,
}
