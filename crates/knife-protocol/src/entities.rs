//! Entities of the event log. Every "updated" event carries one of these whole
//! (upsert by id, last write wins), never a diff. Shapes follow SPEC.md's glossary and
//! `reference/t3code.md` §1.3, trimmed to what knife uses.

use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A named workspace root on disk. Threads run inside it; tools may not leave it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Project {
    pub id: ProjectId,
    pub name: String,
    /// Absolute, canonical path of the workspace root.
    pub root: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Coarse state of an app thread, for lists and the sidebar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    /// No run active; the last run (if any) did not fail.
    Idle,
    /// A run is active.
    Running,
    /// The last run failed; `Thread::last_error` says why.
    Failed,
}

/// One conversation a user has with an agent inside a project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Thread {
    pub id: ThreadId,
    pub project_id: ProjectId,
    pub title: String,
    /// The provider instance (from `knife.toml`) whose runtime executes this thread's turns.
    pub provider_instance_id: ProviderInstanceId,
    /// Model override; `None` uses the instance's default model.
    pub model: Option<String>,
    pub status: ThreadStatus,
    /// The run in progress, if any.
    pub active_run_id: Option<RunId>,
    /// Number of runs created so far (the next run gets ordinal `run_count + 1`).
    pub run_count: u32,
    /// Error of the last failed run, cleared when a new run starts.
    pub last_error: Option<RunError>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Live status of the agent working on the thread (`busy`, `retry{…}`, `idle`;
    /// PROC-06), as last published by the runtime (`thread.status` events). `None`
    /// for threads whose runtime publishes no status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_status: Option<AgentStatus>,
    /// The execution claim (EXEC-04): set when a run starts, in the same transaction
    /// as `run.created`; cleared by the run's terminal event unless the run was
    /// interrupted by a shutdown. `None` = unclaimed. A claim with no live run in
    /// this process is what the restart sweep resumes. Which node runs the claimed
    /// work, until when and under which epoch is the thread's lease (SCALE-04), kept
    /// beside the claim (`thread_leases`), not in the log. Named `time_suspended`
    /// before 2026-12-01; logs written then still decode.
    #[serde(default, alias = "time_suspended")]
    pub claimed_at: Option<Timestamp>,
    /// How many times the restart sweep resumed the claimed work since the last
    /// releasing terminal (EXEC-08/09); reset to 0 with the claim.
    #[serde(default)]
    pub resume_attempts: u32,
    /// The parent of a child (sub-agent) thread; `None` for top-level threads.
    /// Child claims are never resumed, only released (EXEC-03).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<ThreadId>,
    /// When the thread was archived (CHG-08): hidden from default lists, its provider
    /// session released, nothing deleted. `None` = not archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<Timestamp>,
    /// True while the thread has no title of its own: its first message names it
    /// (first line, at most [`AUTO_TITLE_MAX_CHARS`] characters; CHG-08). Cleared by
    /// that automatic title or by a rename.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untitled: bool,
    /// The thread and run this thread was forked from (CHG-09); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ThreadFork>,
    /// The thread's own git worktree, when it was created with `worktree: true`
    /// (CHG-07): its runs work there instead of the project root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::ThreadWorktree>,
    /// Messages sent while a run was active, waiting for it to end, and steers not
    /// yet delivered into it (TURN-01/02). Part of the thread row, so it changes in
    /// the same transaction as the runs it starts.
    #[serde(default, skip_serializing_if = "MessageQueue::is_empty")]
    pub queue: MessageQueue,
    /// What the user added to the budgets for this thread (TURN-07): added to
    /// every limit its runs are checked against. `None` = nothing added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_raise: Option<BudgetRaise>,
}

/// Tokens and cost a user added to the budgets of one thread (TURN-07), summed
/// over every raise.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct BudgetRaise {
    #[serde(default)]
    pub tokens: u64,
    /// Micro-dollars (1 USD = 1,000,000).
    #[serde(default)]
    pub cost_microdollars: u64,
}

/// How a message sent to a thread whose run is active is handled (TURN-01). On an
/// idle thread every mode starts a run at once.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MessageMode {
    /// Wait in the thread's queue; started when the active run ends (default).
    #[default]
    Queue,
    /// Stop the active run (reason `superseded`), then start ahead of the queue.
    Interrupt,
    /// Deliver into the running turn where its runtime can (the built-in agent
    /// before its next model call, codex `turn/steer`); else queued, saying so.
    Steer,
    /// Refuse with 409 `run_in_progress`.
    Reject,
}

impl MessageMode {
    /// Every mode's wire name, for error messages.
    pub const NAMES: &'static [&'static str] = &["queue", "interrupt", "steer", "reject"];
}

/// One message waiting in a thread's queue (TURN-01).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueuedMessage {
    pub id: QueuedMessageId,
    pub text: String,
    /// Model of the run it starts (TURN-10); `None` = the thread's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub queued_at: Timestamp,
    /// `Some(run)` while it is a steer waiting to be delivered into `run`; a steer
    /// still here when that run ends becomes a plain queued message (`None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steer_run_id: Option<RunId>,
    /// What happened to it so far, for people ("the run ended before the steer
    /// was delivered; queued instead").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Why a thread's queue is paused (TURN-02).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueuePauseReason {
    /// The user interrupted a run.
    UserInterrupt,
    /// A run ended after its resume budget was spent (EXEC-08).
    ResumeExhausted,
    /// A run ended because a budget was spent (TURN-07).
    BudgetExceeded,
}

/// A durable pause of a thread's queue (TURN-02): queued messages do not start on
/// their own until the queue is resumed (or cleared).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueuePause {
    pub reason: QueuePauseReason,
    pub paused_at: Timestamp,
}

/// A thread's message queue (TURN-01/02): entries in arrival order (an
/// `interrupt`-mode message goes first) and the pause, if any.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MessageQueue {
    #[serde(default)]
    pub entries: Vec<QueuedMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<QueuePause>,
}

/// Most entries a thread's queue holds (TURN-01); one more answers 400.
pub const QUEUE_MAX_ENTRIES: usize = 100;

impl MessageQueue {
    /// No entries and no pause (what a thread without a queue serialises as: nothing).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.paused.is_none()
    }

    /// The first plain queued entry (not a pending steer), if the queue is not paused.
    pub fn next_to_start(&self) -> Option<&QueuedMessage> {
        if self.paused.is_some() {
            return None;
        }
        self.entries.iter().find(|e| e.steer_run_id.is_none())
    }

    /// Position (1-based) of entry `id` among the entries, if present.
    pub fn position(&self, id: &QueuedMessageId) -> Option<usize> {
        self.entries.iter().position(|e| &e.id == id).map(|i| i + 1)
    }
}

/// Longest title a thread may have, in Unicode characters (CHG-08; longer → HTTP 400).
pub const TITLE_MAX_CHARS: usize = 200;

/// Longest automatic title taken from a thread's first message, in characters (CHG-08).
pub const AUTO_TITLE_MAX_CHARS: usize = 60;

/// The title a thread created without one shows until its first message names it.
pub const UNTITLED_THREAD_TITLE: &str = "New thread";

/// Where a forked thread's history comes from (CHG-09): the source thread's runs
/// `1..=after_run` were copied into it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadFork {
    pub thread_id: ThreadId,
    /// Ordinal of the last source run the fork includes.
    pub after_run: u32,
}

impl Thread {
    /// True while the thread is archived (CHG-08).
    pub fn is_archived(&self) -> bool {
        self.archived_at.is_some()
    }

    /// True while the thread holds an execution claim.
    pub fn is_claimed(&self) -> bool {
        self.claimed_at.is_some()
    }

    /// Takes the claim at `now`; an existing claim keeps its timestamp (EXEC-04).
    pub fn claim(&mut self, now: Timestamp) {
        if self.claimed_at.is_none() {
            self.claimed_at = Some(now);
        }
    }

    /// Releases the claim and resets the resume counter (EXEC-04/05/08).
    pub fn release_claim(&mut self) {
        self.claimed_at = None;
        self.resume_attempts = 0;
    }
}

/// What the agent working on a thread is doing right now (PROC-06, PROC-09).
///
/// JSON: `{"type":"busy"}`, `{"type":"idle"}`,
/// `{"type":"retry","attempt":1,"message":"Too Many Requests","next":"2026-…Z"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentStatus {
    /// Nothing runs.
    Idle,
    /// A model call or tool is in progress.
    Busy,
    /// The last model call failed transiently; the next try starts at `next`.
    Retry {
        /// Retry number of the current model step, starting at 1 (PROC-10).
        attempt: u32,
        /// Why the call is retried (`Too Many Requests`, `Provider is overloaded`, …).
        message: String,
        /// Wall-clock time of the next try.
        next: Timestamp,
        /// Most model calls of the step, the first included (PROC-11), when the
        /// runtime knows it: the next try is call `attempt + 1` of `max_attempts`
        /// (`knife run` prints "attempt 2 of 8", UX-03).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_attempts: Option<u32>,
    },
}

/// A named agent error, as the built-in agent records it on a provider turn and
/// publishes it in `thread.error` events (PROC-04, PROC-09, PROC-11).
///
/// `name` is one of `MessageAbortedError` (the turn was cancelled), `UnknownError`
/// (an error body the agent does not recognise), `APIError` (an HTTP / transport /
/// provider failure), `ContextOverflowError` (the conversation does not fit even
/// after compaction).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentError {
    pub name: String,
    pub message: String,
}

/// Lifecycle of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Completed,
    Interrupted,
    Failed,
    Cancelled,
    /// Stopped because a thread, project or day budget was spent (TURN-07); the
    /// run's error names the budget.
    BudgetExceeded,
}

impl RunStatus {
    /// True for `completed`, `interrupted`, `failed`, `cancelled` and `budget_exceeded`.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

/// A typed failure, as recorded on runs, threads and error turn items.
///
/// `type` is a stable dotted name (`provider.http`, `provider.transport`,
/// `provider.stream`, `provider.config`, `runtime`, `interrupted`, …; EXEC-01) and
/// `message` says what happened and what the user can do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunError {
    #[serde(rename = "type")]
    pub error_type: String,
    pub message: String,
    /// HTTP status of the provider response, when the failure was an HTTP error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Provider error code (`rate_limit_exceeded`, …) when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Extra structured detail (e.g. the provider's parsed JSON error body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

impl RunError {
    /// A failure with just a type and a message.
    pub fn new(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            error_type: error_type.into(),
            message: message.into(),
            http_status: None,
            code: None,
            detail: None,
        }
    }
}

/// One user request on a thread (ordinal 1, 2, …).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Run {
    pub id: RunId,
    pub thread_id: ThreadId,
    /// 1-based position of the run in its thread.
    pub ordinal: u32,
    pub provider_instance_id: ProviderInstanceId,
    pub model: Option<String>,
    pub status: RunStatus,
    /// The user-message turn item that opened this run.
    pub user_message_id: TurnItemId,
    pub requested_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub error: Option<RunError>,
    /// Token usage summed over the run's model calls.
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// The run's start and end checkpoints of its working tree (CHG-01/02).
    #[serde(default, skip_serializing_if = "crate::RunCheckpoints::is_empty")]
    pub checkpoints: crate::RunCheckpoints,
    /// What the run changed in its working tree, once its end checkpoint is recorded (CHG-02).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<crate::ChangeSet>,
}

/// Token counts reported by a provider (tokens, not bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    pub total_tokens: u64,
}

impl TokenUsage {
    /// Adds `other` to `self`, field by field, saturating at `u64::MAX` (the
    /// counts come from the provider's server).
    pub fn add(&mut self, other: &TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// Status of a provider session (one live runtime).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Starting,
    Ready,
    Running,
    Waiting,
    Stopped,
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
    pub id: ProviderSessionId,
    /// Driver kind: `builtin`, `codex`, `acp`, …
    pub driver: String,
    pub provider_instance_id: ProviderInstanceId,
    pub status: SessionStatus,
    /// Working directory (the project root or a worktree).
    pub cwd: String,
    pub model: Option<String>,
    pub capabilities: ProviderCapabilities,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub last_error: Option<String>,
}

/// Status of a provider thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderThreadStatus {
    NotLoaded,
    Idle,
    Active,
    Archived,
    Closed,
    Error,
}

/// Work a runtime keeps running after its turn ended (dev server, sub-agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PendingBackgroundTask {
    pub task_id: String,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// The runtime's native conversation backing an app thread on one provider session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderThread {
    pub id: ProviderThreadId,
    pub driver: String,
    pub provider_instance_id: ProviderInstanceId,
    pub provider_session_id: Option<ProviderSessionId>,
    pub app_thread_id: Option<ThreadId>,
    /// The runtime's own id for the conversation, when it has one.
    pub native_id: Option<String>,
    pub status: ProviderThreadStatus,
    pub last_run_ordinal: Option<u32>,
    #[serde(default)]
    pub pending_background_tasks: Vec<PendingBackgroundTask>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Status of a provider turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderTurnStatus {
    Pending,
    Running,
    Completed,
    Interrupted,
    Failed,
    Cancelled,
}

/// The runtime's execution of one run attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderTurn {
    pub id: ProviderTurnId,
    pub thread_id: ThreadId,
    pub run_id: RunId,
    pub provider_thread_id: Option<ProviderThreadId>,
    pub provider_session_id: ProviderSessionId,
    pub node_id: NodeId,
    /// 1-based attempt number of the run.
    pub ordinal: u32,
    pub status: ProviderTurnStatus,
    pub started_at: Timestamp,
    pub completed_at: Option<Timestamp>,
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

/// Kind of a runtime request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeRequestKind {
    /// Approve running a command.
    Command,
    /// Approve reading a file.
    FileRead,
    /// Approve writing or editing a file.
    FileChange,
    /// Free-form input from the user.
    UserInput,
}

/// Status of a runtime request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeRequestStatus {
    Pending,
    Resolved,
    Expired,
    Cancelled,
}

/// Whether the session that asked can still take the answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseCapability {
    Live {
        provider_session_id: ProviderSessionId,
    },
    NotResumable {
        reason: String,
    },
}

/// A user's answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    AllowOnce,
    AllowAlways,
    Deny,
}

impl ApprovalDecision {
    /// The wire name, as serialized: `allow_once`, `allow_always`, `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::AllowOnce => "allow_once",
            ApprovalDecision::AllowAlways => "allow_always",
            ApprovalDecision::Deny => "deny",
        }
    }

    /// The answer in words for people: `allowed once`, `allowed always`, `denied`.
    pub fn described(self) -> &'static str {
        match self {
            ApprovalDecision::AllowOnce => "allowed once",
            ApprovalDecision::AllowAlways => "allowed always",
            ApprovalDecision::Deny => "denied",
        }
    }
}

/// Something the runtime asks the user mid-turn (approval, input).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RuntimeRequest {
    pub id: RuntimeRequestId,
    pub thread_id: ThreadId,
    /// `None` for requests emitted outside any run (MGR-43).
    pub run_id: Option<RunId>,
    pub node_id: NodeId,
    pub provider_turn_id: Option<ProviderTurnId>,
    pub kind: RuntimeRequestKind,
    pub status: RuntimeRequestStatus,
    pub response_capability: ResponseCapability,
    /// What is asked, for the user (e.g. the command line).
    pub prompt: Option<String>,
    pub created_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    pub decision: Option<ApprovalDecision>,
    /// For a tool approval of the built-in agent: the call, the rule that asked,
    /// and the user's message with the answer. `None` for other requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_approval: Option<ToolApproval>,
}

/// What a tool approval request is about (see [`RuntimeRequest::tool_approval`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolApproval {
    /// The model's id of the call (the tool item's `call_id`).
    pub call_id: String,
    /// The tool's name (`bash`, `write`, `edit`, …).
    pub tool: String,
    /// The call's subject the rules matched: root-relative path or command.
    pub subject: String,
    /// The call's arguments as the model sent them.
    pub input: Value,
    /// Which rule asked: `permission rule 3` or `the default rule`.
    pub rule: String,
    /// The user's words given with the answer (e.g. why it was denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The proposed change as a unified diff (`--- a/path`, `+++ b/path`, hunks), for
    /// `write` / `edit` calls of the built-in agent and codex file changes (CHG-05):
    /// what clients show instead of the raw arguments. `None` when the call changes no
    /// file or its change cannot be worked out (the tool then reports why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// Kind of an execution node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    RootTurn,
    AssistantMessage,
    Reasoning,
    ToolCall,
    ApprovalRequest,
    UserInputRequest,
    System,
}

/// Status of an execution node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    Pending,
    Running,
    Waiting,
    Completed,
    Interrupted,
    Failed,
    Cancelled,
}

/// A node of the tree of work a run produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Node {
    pub id: NodeId,
    pub thread_id: ThreadId,
    pub run_id: Option<RunId>,
    pub parent_node_id: Option<NodeId>,
    pub root_node_id: NodeId,
    pub kind: NodeKind,
    pub status: NodeStatus,
    pub provider_turn_id: Option<ProviderTurnId>,
    pub runtime_request_id: Option<RuntimeRequestId>,
    pub started_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
}

/// Status of a transcript item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnItemStatus {
    Pending,
    Running,
    Waiting,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

/// Who wrote a user-message item.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MessageOrigin {
    /// Typed by the user.
    #[default]
    User,
    /// Written by knife (e.g. the continuation after a restart, EXEC-07).
    System,
}

/// What a transcript item holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnItemKind {
    UserMessage {
        text: String,
        #[serde(default)]
        origin: MessageOrigin,
        /// Short label for system-originated messages ("Continuing after restart").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    AssistantMessage {
        text: String,
        /// True while more text may still arrive.
        streaming: bool,
    },
    Reasoning {
        text: String,
        streaming: bool,
    },
    ToolCall {
        /// The model's id for the call (matches the tool result sent back).
        call_id: String,
        tool: String,
        /// Arguments as the model sent them (parsed JSON when valid, else a string).
        input: Value,
        /// Output the model sees, when the tool finished.
        #[serde(default)]
        output: Option<String>,
        /// Error text the model sees, when the tool failed.
        #[serde(default)]
        error: Option<String>,
    },
    Error {
        error: RunError,
    },
    /// The conversation so far, summarised because it no longer fit the model's
    /// context (PROC-02, PROC-07). The built-in agent sends history from the latest
    /// completed compaction on: the summary, then the user message of its run,
    /// then the items after it.
    Compaction {
        /// The model's summary (empty while it is being written).
        summary: String,
    },
    /// A tool call waiting for (or answered by) the user's approval. Its id is
    /// `item:<request id>`; status `waiting` while pending, `completed` once
    /// answered, `failed` / `cancelled` when the request expired or the turn
    /// stopped. Not sent to the model (the tool item carries the outcome).
    Approval {
        /// The runtime request answering it (`POST /api/threads/{id}/requests/{request_id}`).
        request_id: RuntimeRequestId,
        /// The tool call it guards.
        call_id: String,
        tool: String,
        /// Path or command the rules matched.
        subject: String,
        /// The user's answer, once given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<ApprovalDecision>,
        /// The user's words given with the answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

/// A transcript item: what the user sees of a thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TurnItem {
    pub id: TurnItemId,
    pub thread_id: ThreadId,
    pub run_id: Option<RunId>,
    pub provider_turn_id: Option<ProviderTurnId>,
    /// Position in the transcript: `run_ordinal * 1_000_000 + n` (n = 0 for the user message).
    pub ordinal: u64,
    pub status: TurnItemStatus,
    pub started_at: Option<Timestamp>,
    pub completed_at: Option<Timestamp>,
    pub updated_at: Timestamp,
    #[serde(flatten)]
    pub kind: TurnItemKind,
}

impl TurnItem {
    /// Ordinal of the `n`-th item of run `run_ordinal` (see [`TurnItem::ordinal`]).
    pub fn ordinal_in_run(run_ordinal: u32, n: u64) -> u64 {
        u64::from(run_ordinal) * 1_000_000 + n
    }
}

#[cfg(test)]
mod token_usage_tests {
    use super::TokenUsage;

    #[test]
    fn adding_server_supplied_counts_saturates_instead_of_overflowing() {
        let mut total = TokenUsage {
            input_tokens: u64::MAX - 1,
            output_tokens: 1,
            reasoning_tokens: u64::MAX,
            cached_input_tokens: 0,
            total_tokens: u64::MAX,
        };
        total.add(&TokenUsage {
            input_tokens: 5,
            output_tokens: 2,
            reasoning_tokens: 1,
            cached_input_tokens: u64::MAX,
            total_tokens: 1,
        });
        assert_eq!(total.input_tokens, u64::MAX);
        assert_eq!(total.output_tokens, 3);
        assert_eq!(total.reasoning_tokens, u64::MAX);
        assert_eq!(total.cached_input_tokens, u64::MAX);
        assert_eq!(total.total_tokens, u64::MAX);
    }
}

#[cfg(test)]
mod approval_decision_tests {
    use super::ApprovalDecision;

    #[test]
    fn as_str_is_the_serialized_name() {
        for d in [
            ApprovalDecision::AllowOnce,
            ApprovalDecision::AllowAlways,
            ApprovalDecision::Deny,
        ] {
            assert_eq!(serde_json::to_value(d).ok(), Some(d.as_str().into()));
        }
    }
}
