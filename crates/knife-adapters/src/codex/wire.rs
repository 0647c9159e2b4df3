//! Serde types of the Codex app-server protocol (v2), only the subset knife uses.
//! Field names follow `codex app-server generate-json-schema` of codex 0.169.0;
//! [`SCHEMA_FIELDS`] lists, per schema file, the fields these types use, and a test
//! checks them against a schema generated at test time (tests/codex_schema.rs).
//! Unknown fields are ignored; optional fields are omitted when `None`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Method names.
pub mod method {
    /// Client request: the handshake (client info, capabilities); the first message on the pipe.
    pub const INITIALIZE: &str = "initialize";
    /// Client notification after the `initialize` answer; codex takes requests from then on.
    pub const INITIALIZED: &str = "initialized";
    /// Client request: start a new codex thread (conversation) in a working directory.
    pub const THREAD_START: &str = "thread/start";
    /// Client request: load an existing codex thread by id and resume it.
    pub const THREAD_RESUME: &str = "thread/resume";
    /// Client request: stop receiving a thread's notifications (knife's unload of an idle thread).
    pub const THREAD_UNSUBSCRIBE: &str = "thread/unsubscribe";
    /// Client request: fork a codex thread into a new one, optionally through a given turn (CHG-09).
    pub const THREAD_FORK: &str = "thread/fork";
    /// Client request: start a turn with user input on a thread (input into a running
    /// turn is `turn/steer`).
    pub const TURN_START: &str = "turn/start";
    /// Client request: stop a thread's running turn.
    pub const TURN_INTERRUPT: &str = "turn/interrupt";
    /// Request: more user input for the running turn (TURN-01).
    pub const TURN_STEER: &str = "turn/steer";

    /// Server notification: a turn started (carries the turn).
    pub const TURN_STARTED: &str = "turn/started";
    /// Server notification: a turn ended (`completed`, `interrupted`, `failed`).
    pub const TURN_COMPLETED: &str = "turn/completed";
    /// Server notification: a thread item (message, reasoning, command, file change, MCP call) began.
    pub const ITEM_STARTED: &str = "item/started";
    /// Server notification: a thread item reached its final state.
    pub const ITEM_COMPLETED: &str = "item/completed";
    /// Server notification: more text of an `agentMessage` item.
    pub const AGENT_MESSAGE_DELTA: &str = "item/agentMessage/delta";
    /// Server notification: more raw reasoning text of a `reasoning` item.
    pub const REASONING_TEXT_DELTA: &str = "item/reasoning/textDelta";
    /// Server notification: more reasoning summary text of a `reasoning` item.
    pub const REASONING_SUMMARY_DELTA: &str = "item/reasoning/summaryTextDelta";
    /// Server notification: more output (stdout and stderr as read) of a running
    /// `commandExecution` item.
    pub const COMMAND_OUTPUT_DELTA: &str = "item/commandExecution/outputDelta";
    /// Server notification: the thread's token usage (cumulative and last call).
    pub const TOKEN_USAGE_UPDATED: &str = "thread/tokenUsage/updated";
    /// Server notification: the thread's status changed (`idle`, `active` with flags, …).
    pub const THREAD_STATUS_CHANGED: &str = "thread/status/changed";
    /// Server notification: a turn hit an error, with whether codex will retry it.
    pub const ERROR: &str = "error";
    /// Server notification: codex settled or withdrew one of its server→client requests.
    pub const SERVER_REQUEST_RESOLVED: &str = "serverRequest/resolved";

    /// Server request: approve running a shell command.
    pub const COMMAND_APPROVAL: &str = "item/commandExecution/requestApproval";
    /// Server request: approve applying a file change (patch).
    pub const FILE_CHANGE_APPROVAL: &str = "item/fileChange/requestApproval";
    /// Server request: an MCP server asks the user for input (elicitation).
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
        COMMAND_OUTPUT_DELTA,
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
        "v2/CommandExecutionOutputDeltaNotification.json",
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
    /// Who the client is (knife, its version).
    pub client_info: ClientInfo,
    /// What the client opts into (the experimental API, off).
    pub capabilities: InitializeCapabilities,
}

/// Who the client is.
#[derive(Clone, Debug, Serialize)]
pub struct ClientInfo {
    /// Client name (`knife`).
    pub name: String,
    /// Display title (`knife`); sent as `null` when `None`.
    pub title: Option<String>,
    /// Client version (knife's crate version).
    pub version: String,
}

/// Client capabilities.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeCapabilities {
    /// Opt into codex's experimental API methods and fields (knife sends `false`).
    pub experimental_api: bool,
}

/// `thread/start` and `thread/resume` params (`thread_id` only for resume).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadParams {
    /// Codex thread id to resume; `None` for `thread/start`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Working directory of the thread (the project root or the thread's worktree).
    pub cwd: String,
    /// Codex approval policy (`untrusted`, `on-request`, `never`); `None` = codex's config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<String>,
    /// Codex sandbox mode (`read-only`, `workspace-write`, `danger-full-access`); `None` =
    /// codex's config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Model override; `None` = codex's configured model.
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
    /// The codex thread to fork.
    pub thread_id: String,
    /// Last turn to keep, inclusive (the turn must not be in progress); `None` = every turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_turn_id: Option<String>,
    /// Working directory of the new thread.
    pub cwd: String,
    /// Approval policy of the new thread (as in [`ThreadParams::approval_policy`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<String>,
    /// Sandbox mode of the new thread (as in [`ThreadParams::sandbox`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Model of the new thread; `None` = codex's configured model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `thread/start` / `thread/resume` / `thread/fork` result.
#[derive(Clone, Debug, Deserialize)]
pub struct ThreadResponse {
    /// The started, resumed or forked thread.
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
    /// Plain text input.
    Text {
        /// The text.
        text: String,
    },
}

/// `turn/start` params.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStartParams {
    /// The codex thread to run the turn on.
    pub thread_id: String,
    /// The user's input elements (knife sends one text element).
    pub input: Vec<UserInput>,
    /// Model for this turn and later ones (TURN-10); `None` keeps the thread's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `turn/start` result.
#[derive(Clone, Debug, Deserialize)]
pub struct TurnResponse {
    /// The started turn (its id is what `turn/interrupt` names).
    pub turn: TurnInfo,
}

/// A turn as codex reports it.
#[derive(Clone, Debug, Deserialize)]
pub struct TurnInfo {
    /// Codex's turn id; recorded as the provider turn's `native_turn_id`.
    pub id: String,
    /// `completed`, `interrupted`, `failed`, `inProgress`.
    #[serde(default)]
    pub status: Option<String>,
    /// Why the turn failed, for `failed` turns; `None` otherwise.
    #[serde(default)]
    pub error: Option<TurnError>,
}

/// Why a turn failed.
#[derive(Clone, Debug, Deserialize)]
pub struct TurnError {
    /// Codex's error text, shown to the user as the run's error message.
    pub message: String,
}

/// `turn/interrupt` params.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnInterruptParams {
    /// The thread of the turn to stop.
    pub thread_id: String,
    /// The turn to stop (from `turn/start`'s answer or `turn/started`).
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
    /// The codex thread to stop following.
    pub thread_id: String,
}

/// `turn/started` / `turn/completed`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnNotification {
    /// The codex thread of the turn.
    pub thread_id: String,
    /// The turn, with its status (and error) on `turn/completed`.
    pub turn: TurnInfo,
}

/// `item/started` / `item/completed`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemNotification {
    /// The item as codex sent it (`ThreadItem`, parsed later by its `type`).
    pub item: Value,
    /// The codex thread of the item.
    pub thread_id: String,
    /// The turn the item belongs to.
    pub turn_id: String,
}

/// The item kinds knife maps (`ThreadItem` in the schema); others become generic tool items.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ThreadItem {
    /// The user's input echoed as an item (knife records its own user message instead).
    UserMessage {
        /// Codex's item id.
        id: String,
    },
    /// Text the model wrote.
    AgentMessage {
        /// Codex's item id.
        id: String,
        /// The message text (whole on `item/completed`).
        #[serde(default)]
        text: String,
    },
    /// The model's reasoning, as summary and/or raw content.
    Reasoning {
        /// Codex's item id.
        id: String,
        /// Reasoning summary paragraphs.
        #[serde(default)]
        summary: Vec<String>,
        /// Raw reasoning text paragraphs (where the model exposes them).
        #[serde(default)]
        content: Vec<String>,
    },
    /// A shell command codex ran (or asks to run).
    #[serde(rename_all = "camelCase")]
    CommandExecution {
        /// Codex's item id.
        id: String,
        /// The command line.
        command: String,
        /// The command's working directory.
        #[serde(default)]
        cwd: Option<String>,
        /// `inProgress`, `completed`, `failed`, `declined`.
        status: String,
        /// The command's stdout and stderr, interleaved as produced.
        #[serde(default)]
        aggregated_output: Option<String>,
        /// The command's exit code, once it exited.
        #[serde(default)]
        exit_code: Option<i64>,
    },
    /// A patch codex applies to files.
    FileChange {
        /// Codex's item id.
        id: String,
        /// The file updates (`FileUpdateChange`: path, kind, diff), kept as JSON.
        #[serde(default)]
        changes: Vec<Value>,
        /// `inProgress`, `completed`, `failed`, `declined`.
        status: String,
    },
    /// A call of a tool on an MCP server (knife's `/mcp` or the user's).
    McpToolCall {
        /// Codex's item id.
        id: String,
        /// The MCP server's name (as configured in codex).
        server: String,
        /// The tool's name.
        tool: String,
        /// `inProgress`, `completed`, `failed`.
        status: String,
        /// The call's arguments (JSON).
        #[serde(default)]
        arguments: Value,
        /// The tool's result (`McpToolCallResult`), once it succeeded.
        #[serde(default)]
        result: Option<Value>,
        /// Why the call failed, when it did.
        #[serde(default)]
        error: Option<TurnError>,
    },
}

/// Text deltas (`item/agentMessage/delta`, `item/reasoning/*Delta`) and command
/// output deltas (`item/commandExecution/outputDelta`, the text as codex decoded it).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeltaNotification {
    /// The codex thread of the item.
    pub thread_id: String,
    /// The turn of the item.
    pub turn_id: String,
    /// The item whose text grows.
    pub item_id: String,
    /// The new text, appended to the item's text.
    pub delta: String,
}

/// `thread/tokenUsage/updated`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsageNotification {
    /// The codex thread.
    pub thread_id: String,
    /// The turn whose model call the `last` counts are of.
    pub turn_id: String,
    /// Cumulative and last-call counts.
    pub token_usage: ThreadTokenUsage,
}

/// Cumulative (`total`) and last-call (`last`) usage of a thread.
#[derive(Clone, Debug, Deserialize)]
pub struct ThreadTokenUsage {
    /// Summed over the whole thread.
    pub total: TokenBreakdown,
    /// Of the last model call.
    pub last: TokenBreakdown,
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TokenBreakdown {
    /// Total tokens (input + output).
    pub total_tokens: u64,
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Prompt tokens served from the cache.
    pub cached_input_tokens: u64,
    /// Generated tokens, reasoning included.
    pub output_tokens: u64,
    /// Reasoning tokens among `output_tokens`.
    pub reasoning_output_tokens: u64,
}

/// `thread/status/changed`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStatusNotification {
    /// The codex thread.
    pub thread_id: String,
    /// Its new status.
    pub status: ThreadStatus,
}

/// A thread's status (`notLoaded`, `idle`, `systemError`, `active`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStatus {
    /// `notLoaded`, `idle`, `systemError` or `active` (JSON `type`).
    #[serde(rename = "type")]
    pub kind: String,
    /// With `active`: `waitingOnApproval`, `waitingOnUserInput`; empty otherwise.
    #[serde(default)]
    pub active_flags: Vec<String>,
}

/// `error` notification.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorNotification {
    /// The error (codex's message).
    pub error: TurnError,
    /// True when codex retries on its own (knife then shows a retry status, not a failure).
    pub will_retry: bool,
    /// The codex thread.
    pub thread_id: String,
    /// The turn that hit the error.
    pub turn_id: String,
}

/// `serverRequest/resolved`: codex withdrew or settled one of its requests.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerRequestResolved {
    /// The codex thread the request was about.
    pub thread_id: String,
    /// The JSON-RPC id of the settled request (number or string).
    pub request_id: Value,
}

/// `item/commandExecution/requestApproval` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandApprovalParams {
    /// The codex thread asking.
    pub thread_id: String,
    /// The turn that wants to run the command.
    pub turn_id: String,
    /// The `commandExecution` item the approval is for.
    pub item_id: String,
    /// The command to be run; `None` when codex leaves it out.
    #[serde(default)]
    pub command: Option<String>,
    /// The command's working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Why codex asks (e.g. it needs network access); `None` when not given.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `item/fileChange/requestApproval` params.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChangeApprovalParams {
    /// The codex thread asking.
    pub thread_id: String,
    /// The turn that wants to change files.
    pub turn_id: String,
    /// The `fileChange` item the approval is for (its `changes` hold the patch).
    pub item_id: String,
    /// Why codex asks (e.g. it needs extra write access); `None` when not given.
    #[serde(default)]
    pub reason: Option<String>,
    /// A root codex asks to write under for the rest of the session (unstable in codex).
    #[serde(default)]
    pub grant_root: Option<String>,
}

/// `mcpServer/elicitation/request` params (the fields knife reads).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationParams {
    /// The codex thread the elicitation was observed on.
    pub thread_id: String,
    /// Codex's active turn when it saw the request, if it could correlate one.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// The MCP server asking.
    pub server_name: String,
    /// The server's message to the user, if any.
    #[serde(default)]
    pub message: Option<String>,
    /// The request's `_meta` (MCP metadata), kept as JSON to echo back.
    #[serde(default, rename = "_meta")]
    pub meta: Option<Value>,
}

/// Answer to a command or file-change approval: `accept`, `acceptForSession`,
/// `decline`, `cancel`.
#[derive(Clone, Debug, Serialize)]
pub struct ApprovalResponse {
    /// `accept`, `acceptForSession`, `decline` or `cancel`.
    pub decision: &'static str,
}

/// Answer to an elicitation: `accept` (with `content`), `decline`, `cancel`.
#[derive(Clone, Debug, Serialize)]
pub struct ElicitationResponse {
    /// `accept`, `decline` or `cancel`.
    pub action: &'static str,
    /// The user's input for an accepted elicitation; `None` for decline / cancel.
    pub content: Option<Value>,
    /// Client metadata for form-mode handling; left out when `None`.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}
