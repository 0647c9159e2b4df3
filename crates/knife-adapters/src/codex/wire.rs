//! Serde types of the Codex app-server protocol (v2), only the subset knife uses.
//! Field names follow `codex app-server generate-json-schema` of codex 0.169.0;
//! [`SCHEMA_FIELDS`] lists, per schema file, the fields these types use, and a test
//! checks them against a schema generated at test time (tests/codex_schema.rs).
//! Unknown fields are ignored; optional fields are omitted when `None`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Method names.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const INITIALIZED: &str = "initialized";
    pub const THREAD_START: &str = "thread/start";
    pub const THREAD_RESUME: &str = "thread/resume";
    pub const THREAD_UNSUBSCRIBE: &str = "thread/unsubscribe";
    pub const THREAD_FORK: &str = "thread/fork";
    pub const TURN_START: &str = "turn/start";
    pub const TURN_INTERRUPT: &str = "turn/interrupt";
    /// Request: more user input for the running turn (TURN-01).
    pub const TURN_STEER: &str = "turn/steer";

    pub const TURN_STARTED: &str = "turn/started";
    pub const TURN_COMPLETED: &str = "turn/completed";
    pub const ITEM_STARTED: &str = "item/started";
    pub const ITEM_COMPLETED: &str = "item/completed";
    pub const AGENT_MESSAGE_DELTA: &str = "item/agentMessage/delta";
    pub const REASONING_TEXT_DELTA: &str = "item/reasoning/textDelta";
    pub const REASONING_SUMMARY_DELTA: &str = "item/reasoning/summaryTextDelta";
    pub const TOKEN_USAGE_UPDATED: &str = "thread/tokenUsage/updated";
    pub const THREAD_STATUS_CHANGED: &str = "thread/status/changed";
    pub const ERROR: &str = "error";
    pub const SERVER_REQUEST_RESOLVED: &str = "serverRequest/resolved";

    pub const COMMAND_APPROVAL: &str = "item/commandExecution/requestApproval";
    pub const FILE_CHANGE_APPROVAL: &str = "item/fileChange/requestApproval";
    pub const MCP_ELICITATION: &str = "mcpServer/elicitation/request";

    /// Requests knife sends (schema `ClientRequest.json`).
    pub const CLIENT_REQUESTS: &[&str] = &[
        INITIALIZE,
        THREAD_START,
        THREAD_RESUME,
        THREAD_UNSUBSCRIBE,
        THREAD_FORK,
        TURN_START,
        TURN_INTERRUPT,
        TURN_STEER,
    ];
    /// Notifications knife sends (schema `ClientNotification.json`).
    pub const CLIENT_NOTIFICATIONS: &[&str] = &[INITIALIZED];
    /// Notifications knife reads (schema `ServerNotification.json`).
    pub const SERVER_NOTIFICATIONS: &[&str] = &[
        TURN_STARTED,
        TURN_COMPLETED,
        ITEM_STARTED,
        ITEM_COMPLETED,
        AGENT_MESSAGE_DELTA,
        REASONING_TEXT_DELTA,
        REASONING_SUMMARY_DELTA,
        TOKEN_USAGE_UPDATED,
        THREAD_STATUS_CHANGED,
        ERROR,
        SERVER_REQUEST_RESOLVED,
    ];
    /// Server→client requests knife answers (schema `ServerRequest.json`).
    pub const SERVER_REQUESTS: &[&str] = &[COMMAND_APPROVAL, FILE_CHANGE_APPROVAL, MCP_ELICITATION];
}

/// `ThreadItem` type → the fields [`ThreadItem`] reads (checked against the schema).
pub const ITEM_FIELDS: &[(&str, &[&str])] = &[
    ("userMessage", &["id"]),
    ("agentMessage", &["id", "text"]),
    ("reasoning", &["id", "summary", "content"]),
    (
        "commandExecution",
        &[
            "id",
            "command",
            "cwd",
            "status",
            "aggregatedOutput",
            "exitCode",
        ],
    ),
    ("fileChange", &["id", "changes", "status"]),
    (
        "mcpToolCall",
        &[
            "id",
            "server",
            "tool",
            "status",
            "arguments",
            "result",
            "error",
        ],
    ),
];

/// Schema file (relative to the generated directory) → the fields knife's types use.
pub const SCHEMA_FIELDS: &[(&str, &[&str])] = &[
    ("v1/InitializeParams.json", &["clientInfo", "capabilities"]),
    (
        "v2/ThreadStartParams.json",
        &["cwd", "approvalPolicy", "sandbox", "model", "config"],
    ),
    (
        "v2/ThreadResumeParams.json",
        &[
            "threadId",
            "cwd",
            "approvalPolicy",
            "sandbox",
            "model",
            "config",
            "excludeTurns",
        ],
    ),
    ("v2/ThreadStartResponse.json", &["thread"]),
    ("v2/ThreadResumeResponse.json", &["thread"]),
    ("v2/TurnStartParams.json", &["threadId", "input", "model"]),
    ("v2/TurnStartResponse.json", &["turn"]),
    ("v2/TurnInterruptParams.json", &["threadId", "turnId"]),
    (
        "v2/TurnSteerParams.json",
        &["threadId", "input", "expectedTurnId"],
    ),
    ("v2/TurnSteerResponse.json", &["turnId"]),
    ("v2/ThreadUnsubscribeParams.json", &["threadId"]),
    (
        "v2/ThreadForkParams.json",
        &[
            "threadId",
            "lastTurnId",
            "cwd",
            "approvalPolicy",
            "sandbox",
            "model",
        ],
    ),
    ("v2/ThreadForkResponse.json", &["thread"]),
    ("v2/TurnStartedNotification.json", &["threadId", "turn"]),
    ("v2/TurnCompletedNotification.json", &["threadId", "turn"]),
    (
        "v2/ItemStartedNotification.json",
        &["item", "threadId", "turnId"],
    ),
    (
        "v2/ItemCompletedNotification.json",
        &["item", "threadId", "turnId"],
    ),
    (
        "v2/AgentMessageDeltaNotification.json",
        &["threadId", "turnId", "itemId", "delta"],
    ),
    (
        "v2/ReasoningTextDeltaNotification.json",
        &["threadId", "turnId", "itemId", "delta"],
    ),
    (
        "v2/ReasoningSummaryTextDeltaNotification.json",
        &["threadId", "turnId", "itemId", "delta"],
    ),
    (
        "v2/ThreadTokenUsageUpdatedNotification.json",
        &["threadId", "turnId", "tokenUsage"],
    ),
    (
        "v2/ThreadStatusChangedNotification.json",
        &["threadId", "status"],
    ),
    (
        "v2/ErrorNotification.json",
        &["error", "willRetry", "threadId", "turnId"],
    ),
    (
        "v2/ServerRequestResolvedNotification.json",
        &["threadId", "requestId"],
    ),
    (
        "CommandExecutionRequestApprovalParams.json",
        &["threadId", "turnId", "itemId", "command", "cwd", "reason"],
    ),
    (
        "CommandExecutionRequestApprovalResponse.json",
        &["decision"],
    ),
    (
        "FileChangeRequestApprovalParams.json",
        &["threadId", "turnId", "itemId", "reason", "grantRoot"],
    ),
    ("FileChangeRequestApprovalResponse.json", &["decision"]),
    (
        "McpServerElicitationRequestParams.json",
        &["threadId", "turnId", "serverName"],
    ),
    (
        "McpServerElicitationRequestResponse.json",
        &["action", "content", "_meta"],
    ),
];

/// `initialize` params.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub client_info: ClientInfo,
    pub capabilities: InitializeCapabilities,
}

/// Who the client is.
#[derive(Clone, Debug, Serialize)]
pub struct ClientInfo {
    pub name: String,
    pub title: Option<String>,
    pub version: String,
}

/// Client capabilities.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeCapabilities {
    pub experimental_api: bool,
}

/// `thread/start` and `thread/resume` params (`thread_id` only for resume).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    pub cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Config overrides (`mcp_servers` …), merged over `CODEX_HOME/config.toml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// Resume only: do not send the old turns back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude_turns: Option<bool>,
}

/// `thread/fork` params (CHG-09): fork `thread_id` through `last_turn_id` (inclusive;
/// `None` = every turn) into a new codex thread with these settings.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadForkParams {
    pub thread_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_turn_id: Option<String>,
    pub cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `thread/start` / `thread/resume` / `thread/fork` result.
#[derive(Clone, Debug, Deserialize)]
pub struct ThreadResponse {
    pub thread: ThreadInfo,
}

/// A thread as codex reports it.
#[derive(Clone, Debug, Deserialize)]
pub struct ThreadInfo {
    /// Codex's thread id (UUID v7).
    pub id: String,
}

/// One user input element.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum UserInput {
    Text { text: String },
}

/// `turn/start` params.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStartParams {
    pub thread_id: String,
    pub input: Vec<UserInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `turn/start` result.
#[derive(Clone, Debug, Deserialize)]
pub struct TurnResponse {
    pub turn: TurnInfo,
}

/// A turn as codex reports it.
#[derive(Clone, Debug, Deserialize)]
pub struct TurnInfo {
    pub id: String,
    /// `completed`, `interrupted`, `failed`, `inProgress`.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub error: Option<TurnError>,
}

/// Why a turn failed.
#[derive(Clone, Debug, Deserialize)]
pub struct TurnError {
    pub message: String,
}

/// `turn/interrupt` params.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnInterruptParams {
    pub thread_id: String,
    pub turn_id: String,
}

/// `turn/steer` params: more user input for the running turn `expected_turn_id`
/// (codex refuses when another turn, or none, is running; TURN-01).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerParams {
    /// The codex thread.
    pub thread_id: String,
    /// The user's message.
    pub input: Vec<UserInput>,
    /// The turn knife runs: codex refuses when another (or none) is active.
    pub expected_turn_id: String,
}

/// `turn/steer` result: the turn that took the input.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerResponse {
    /// The turn that took the input.
    pub turn_id: String,
}

/// `thread/unsubscribe` params.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadUnsubscribeParams {
    pub thread_id: String,
}

/// `turn/started` / `turn/completed`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnNotification {
    pub thread_id: String,
    pub turn: TurnInfo,
}

/// `item/started` / `item/completed`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemNotification {
    pub item: Value,
    pub thread_id: String,
    pub turn_id: String,
}

/// The item kinds knife maps (`ThreadItem` in the schema); others become generic tool items.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ThreadItem {
    UserMessage {
        id: String,
    },
    AgentMessage {
        id: String,
        #[serde(default)]
        text: String,
    },
    Reasoning {
        id: String,
        #[serde(default)]
        summary: Vec<String>,
        #[serde(default)]
        content: Vec<String>,
    },
    #[serde(rename_all = "camelCase")]
    CommandExecution {
        id: String,
        command: String,
        #[serde(default)]
        cwd: Option<String>,
        /// `inProgress`, `completed`, `failed`, `declined`.
        status: String,
        #[serde(default)]
        aggregated_output: Option<String>,
        #[serde(default)]
        exit_code: Option<i64>,
    },
    FileChange {
        id: String,
        #[serde(default)]
        changes: Vec<Value>,
        /// `inProgress`, `completed`, `failed`, `declined`.
        status: String,
    },
    McpToolCall {
        id: String,
        server: String,
        tool: String,
        /// `inProgress`, `completed`, `failed`.
        status: String,
        #[serde(default)]
        arguments: Value,
        #[serde(default)]
        result: Option<Value>,
        #[serde(default)]
        error: Option<TurnError>,
    },
}

/// Text deltas (`item/agentMessage/delta`, `item/reasoning/*Delta`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeltaNotification {
    pub thread_id: String,
    pub turn_id: String,
    pub item_id: String,
    pub delta: String,
}

/// `thread/tokenUsage/updated`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsageNotification {
    pub thread_id: String,
    pub turn_id: String,
    pub token_usage: ThreadTokenUsage,
}

/// Cumulative (`total`) and last-call (`last`) usage of a thread.
#[derive(Clone, Debug, Deserialize)]
pub struct ThreadTokenUsage {
    pub total: TokenBreakdown,
    pub last: TokenBreakdown,
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TokenBreakdown {
    pub total_tokens: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_output_tokens: u64,
}

/// `thread/status/changed`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStatusNotification {
    pub thread_id: String,
    pub status: ThreadStatus,
}

/// A thread's status (`notLoaded`, `idle`, `systemError`, `active`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStatus {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub active_flags: Vec<String>,
}

/// `error` notification.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorNotification {
    pub error: TurnError,
    pub will_retry: bool,
    pub thread_id: String,
    pub turn_id: String,
}

/// `serverRequest/resolved`: codex withdrew or settled one of its requests.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerRequestResolved {
    pub thread_id: String,
    pub request_id: Value,
}

/// `item/commandExecution/requestApproval` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandApprovalParams {
    pub thread_id: String,
    pub turn_id: String,
    pub item_id: String,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// `item/fileChange/requestApproval` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChangeApprovalParams {
    pub thread_id: String,
    pub turn_id: String,
    pub item_id: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub grant_root: Option<String>,
}

/// `mcpServer/elicitation/request` params (the fields knife reads).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationParams {
    pub thread_id: String,
    #[serde(default)]
    pub turn_id: Option<String>,
    pub server_name: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, rename = "_meta")]
    pub meta: Option<Value>,
}

/// Answer to a command or file-change approval: `accept`, `acceptForSession`,
/// `decline`, `cancel`.
#[derive(Clone, Debug, Serialize)]
pub struct ApprovalResponse {
    pub decision: &'static str,
}

/// Answer to an elicitation: `accept` (with `content`), `decline`, `cancel`.
#[derive(Clone, Debug, Serialize)]
pub struct ElicitationResponse {
    pub action: &'static str,
    pub content: Option<Value>,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}
