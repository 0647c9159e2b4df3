//! HTTP API request and response bodies (JSON under `/api`) and the WebSocket
//! messages of `/api/ws`.

use crate::Timestamp;
use crate::entities::*;
use crate::events::StoredEvent;
use crate::ids::*;
use crate::live::{DeltaMessage, ItemReset};
use serde::{Deserialize, Serialize};

/// `POST /api/projects`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProjectRequest {
    /// Path of an existing directory; stored canonicalised.
    pub root: String,
    /// Display name; defaults to the directory's name.
    #[serde(default)]
    pub name: Option<String>,
}

/// `POST /api/threads`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateThreadRequest {
    /// The project the thread works in (`project_…`, from `POST /api/projects`).
    pub project_id: ProjectId,
    /// Title, at most [`TITLE_MAX_CHARS`] characters; absent: the thread is untitled
    /// and its first message names it (CHG-08).
    #[serde(default)]
    pub title: Option<String>,
    /// Provider instance from `knife.toml`; defaults to the configured default instance.
    #[serde(default)]
    pub provider_instance_id: Option<ProviderInstanceId>,
    /// Model override for every run of the thread; absent: the instance's default model.
    #[serde(default)]
    pub model: Option<String>,
    /// Makes the new thread a child (sub-agent) thread of this one (EXEC-03: child
    /// claims are released at restart, never resumed). Must exist in the same project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_thread_id: Option<ThreadId>,
    /// Run the thread in its own git worktree on branch `knife/<short id>` (CHG-07);
    /// default: the project's `[[projects]] worktree` setting, else false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<bool>,
}

/// One configured provider instance (`GET /api/providers`), from `knife.toml`'s
/// `[providers.<id>]`: what the page offers when it starts a thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProviderInstanceInfo {
    /// The instance id (`[providers.<id>]`), as `CreateThreadRequest::provider_instance_id` takes it.
    pub id: ProviderInstanceId,
    /// The configured driver: `openai-chat`, `anthropic`, `openai-responses`, `codex`, `acp`.
    pub driver: String,
    /// The instance's default model; `null` when the config names none (an external
    /// runtime then uses its own default).
    #[serde(default)]
    pub model: Option<String>,
    /// `true` for the instance a new thread gets when it names none (`default_provider`).
    pub default: bool,
}

/// One live provider session (`GET /api/sessions`, `knife sessions list`); built by
/// the session manager's `describe()`. Times are RFC 3339 UTC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveSession {
    /// The session's id (`psession_…`); what `POST /api/sessions/{id}/close` takes.
    pub provider_session_id: ProviderSessionId,
    /// Driver kind (`builtin`, `codex`, …).
    pub driver: String,
    /// The `knife.toml` provider instance the session belongs to.
    pub provider_instance_id: ProviderInstanceId,
    /// The session record's status (`ready`, `running`, …).
    pub status: SessionStatus,
    /// Model override of the session, if any.
    #[serde(default)]
    pub model: Option<String>,
    /// The workspace the session runs in.
    pub cwd: String,
    /// What the runtime supports.
    pub capabilities: ProviderCapabilities,
    /// Attached threads, sorted.
    pub threads: Vec<ThreadId>,
    /// Provider turns running now, sorted.
    pub busy_turns: Vec<ProviderTurnId>,
    /// When the idle release is due if nothing happens (a pin may defer it); `null`
    /// while a turn runs.
    #[serde(default)]
    pub idle_deadline: Option<Timestamp>,
    /// Since when pending background work defers the idle release; `null` unless pinned.
    #[serde(default)]
    pub pinned_since: Option<Timestamp>,
    /// Attached threads holding an MCP credential of this session (empty when MCP is off).
    #[serde(default)]
    pub mcp_threads: Vec<ThreadId>,
    /// The node holding the session (its `[store] node_id`; `local` on one node)
    /// (SCALE-06).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `true` for a session another node holds than the one that answered (listed from
    /// the store): its `busy_turns`, `idle_deadline`, `pinned_since` and `mcp_threads`
    /// are only known to that node (empty / `null` here), and only that node can close
    /// it: a close sent to another node is handed to it through the log.
    #[serde(default)]
    pub remote: bool,
}

/// `POST /api/sessions/{id}/close`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CloseSessionResponse {
    /// The session that was closed.
    pub provider_session_id: ProviderSessionId,
    /// Always `true` on 200: the session was released (`stopped`).
    pub closed: bool,
}

/// `PATCH /api/threads/{id}` (CHG-08): rename and/or archive / unarchive. Fields left
/// out stay as they are. `title` is trimmed and must be 1..=[`TITLE_MAX_CHARS`]
/// characters without control characters (else 400).
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateThreadRequest {
    /// New title (trimmed, 1..=[`TITLE_MAX_CHARS`] characters); absent: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `true` archives (refused with 409 while a run is active), `false` unarchives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
}

/// Answer to `DELETE /api/threads/{id}` (CHG-08).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeleteThreadResponse {
    /// The deleted thread.
    pub thread_id: ThreadId,
    /// When the thread was marked deleted (its events are purged later by `knife db purge`).
    pub deleted_at: Timestamp,
    /// The run that was stopped first (`?force=true` while a run was active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_run_id: Option<RunId>,
}

/// `POST /api/threads/{id}/fork` (CHG-09).
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkThreadRequest {
    /// Ordinal of the last source run the fork keeps; default: the source's last
    /// finished run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_run: Option<u32>,
    /// Title of the new thread; default `<source title> (fork)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// `POST /api/threads/{id}/messages`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostMessageRequest {
    /// The message text; becomes the run's user message (or the queued / steered text).
    pub text: String,
    /// Model for this run only (TURN-10), recorded on the run; absent or `null`:
    /// the thread's model. Later messages go back to the thread's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What to do when a run is active (TURN-01): `queue` (default), `interrupt`,
    /// `steer`, `reject`. Another value answers 400 naming the allowed ones.
    #[serde(default)]
    pub mode: MessageMode,
}

/// What became of a posted message (TURN-01).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageDelivery {
    /// It started run `run_id`.
    Started,
    /// It waits in the thread's queue at `position` until the active run ends.
    Queued,
    /// It was handed to the running turn `run_id`, which takes it before its next
    /// model call; if the run ends first it becomes a queued message.
    Steering,
}

/// Answer to `POST /api/threads/{id}/messages` (HTTP 202).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PostMessageResponse {
    /// The thread the message was posted to.
    pub thread_id: ThreadId,
    /// `started`, `queued` or `steering`.
    pub status: MessageDelivery,
    /// The run the message started (`started`), steers (`steering`) or waits for (`queued`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// The queue entry (`queued`, `steering`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedMessage>,
    /// 1-based position in the thread's queue (`queued`, `steering`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
    /// What knife did instead of what was asked, for people ("no run was active: the
    /// message started a run", "this runtime cannot take input during a turn: queued").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `POST /api/threads/{id}/budget` (TURN-07): adds to the budgets of the thread
/// and, with `continue`, starts a continuation run once it is idle.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RaiseBudgetRequest {
    /// Tokens to add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// USD to add (0 or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Start a run that continues the work (the thread must be idle).
    #[serde(default, rename = "continue")]
    pub continue_run: bool,
}

/// Answer of `POST /api/threads/{id}/budget`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RaiseBudgetResponse {
    /// The thread whose budgets were raised.
    pub thread_id: ThreadId,
    /// Everything added to this thread's budgets so far.
    pub budget_raise: BudgetRaise,
    /// The continuation run, when `continue` started one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
}

/// `GET /api/threads/{id}/queue` and the answer of the queue commands (TURN-01/02).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueueResponse {
    /// The thread whose queue this is.
    pub thread_id: ThreadId,
    /// The active run, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<RunId>,
    /// The queue's `entries` and `paused`, flattened into this object.
    #[serde(flatten)]
    pub queue: MessageQueue,
}

/// Answer to `POST /api/threads/{id}/interrupt`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InterruptResponse {
    /// The thread that was asked to stop.
    pub thread_id: ThreadId,
    /// The run that was asked to stop, or `None` when nothing was running.
    pub run_id: Option<RunId>,
}

/// `POST /api/threads/{id}/requests/{request_id}`: the user's answer to a runtime
/// request (tool approval). Also what an adapter's `respond_to_runtime_request` gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestAnswer {
    /// `allow_once`, `allow_always` (this tool on this exact subject for the rest of
    /// the thread's session) or `deny`.
    pub decision: ApprovalDecision,
    /// Optional words for the agent (with `deny`: why, or what to do instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The full projection of one thread (`GET /api/threads/{id}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadProjection {
    /// The thread row.
    pub thread: Thread,
    /// Every run of the thread, by ordinal.
    pub runs: Vec<Run>,
    /// Ordered by `ordinal`.
    pub turn_items: Vec<TurnItem>,
    /// Nodes of the runs' work trees.
    pub nodes: Vec<Node>,
    /// Sessions bound to this thread.
    pub provider_sessions: Vec<ProviderSession>,
    /// Native conversations backing the thread.
    pub provider_threads: Vec<ProviderThread>,
    /// Every provider turn (run attempt) of the thread.
    pub provider_turns: Vec<ProviderTurn>,
    /// Every runtime request of the thread, pending or settled.
    pub runtime_requests: Vec<RuntimeRequest>,
    /// Highest event sequence of this thread included in the projection.
    pub latest_sequence: u64,
    /// The thread's MCP credential state (never the token); filled by the server,
    /// `None` where no `/mcp` endpoint runs (SPEC.md MCP-12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<crate::McpCredentialInfo>,
    /// The thread's lease (SCALE-04/06): the node that runs (or last ran) its claimed
    /// work; filled by the server, `None` when the thread never had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<ThreadLease>,
}

/// Which node holds a thread's lease (`ThreadProjection::lease`, SCALE-06).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadLease {
    /// The node's `[store] node_id` (`local` on one node).
    pub node: String,
    /// Grows with every acquisition of the thread's lease.
    pub epoch: u64,
    /// When it expires unless renewed (the database's clock); a lease in the past was
    /// let go or belonged to a node that stopped.
    pub expires_at: Timestamp,
}

/// `GET /api/events/latest`: the highest sequence in the whole event log (0 when
/// empty). A client that subscribes to a thread with `after` set to it gets only
/// what happens from now on (the web page's sidebar follows every thread's status
/// this way without replaying their histories).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatestSequenceResponse {
    /// Highest event sequence in the log; 0 when the log is empty.
    pub sequence: u64,
}

/// JSON error body of every non-2xx API answer: `{"error": {"code", "message"}}`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApiErrorBody {
    /// The error.
    pub error: ApiError,
}

/// A stable machine code (`not_found`, `invalid_request`, `conflict`, …) and a
/// human message saying what to do.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApiError {
    /// Stable machine code (`not_found`, `invalid_request`, `conflict`, `run_in_progress`, …);
    /// clients branch on it.
    pub code: String,
    /// What happened and what to do, for people.
    pub message: String,
    /// The files a `revert_conflict` is about (CHG-04); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// Messages a WebSocket client sends on `/api/ws`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WsClientMessage {
    /// Replay the thread's events with `sequence > after`, then follow live.
    Subscribe {
        /// The thread to follow.
        thread_id: ThreadId,
        /// Replay events with `sequence > after` first (0: the whole history).
        #[serde(default)]
        after: u64,
    },
    /// Stop following the thread.
    Unsubscribe {
        /// The thread to stop following.
        thread_id: ThreadId,
    },
}

/// Messages the server sends on `/api/ws`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WsServerMessage {
    /// The subscription is active: replay from `after` follows, then live events.
    Subscribed {
        /// The thread subscribed to.
        thread_id: ThreadId,
        /// The `after` the replay starts from.
        after: u64,
    },
    /// One stored event of a subscribed thread, in sequence order.
    Event {
        /// The event, as stored in the log (sequence, id, body).
        event: Box<StoredEvent>,
    },
    /// More streaming text of an item, not durable (LIVE-01): `{"type":"delta",
    /// "item_id","field","offset","text"}`, plus `"thread_id","run_id","ordinal"` in
    /// the delta introducing the item on this subscription ([`DeltaMessage`]).
    Delta(DeltaMessage),
    /// The item's live text is void (a discarded attempt): `{"type":"reset",
    /// "thread_id","item_id"}`.
    Reset(ItemReset),
    /// Something failed: a client message was refused (bad JSON, unknown thread; the
    /// socket stays open) or the server ended a subscription (`code` says why).
    Error {
        /// The error, with its stable code.
        error: ApiError,
    },
}
