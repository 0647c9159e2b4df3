//! Serde types for the subset of the Agent Client Protocol (v1, `protocolVersion: 1`)
//! that the `acp` driver speaks. Field names follow the protocol's JSON (camelCase;
//! tags `sessionUpdate`, `type`, `outcome`).
//!
//! Why not the `agent-client-protocol-schema` crate (=1.17.0, the one
//! `agent-client-protocol` 5.2.0 pins)? It turns on `serde_json/preserve_order`,
//! which Cargo's feature unification would switch on for every crate of the
//! workspace (JSON object key order changes everywhere knife serialises a
//! `serde_json::Value`), and its structs are `#[non_exhaustive]` builders. The wire
//! protocol is stable; this module holds only what knife sends and reads, and is
//! lenient where the agent talks (unknown updates, content blocks and tool content
//! deserialize to an `Other` variant instead of failing). See
//! docs/2026-11-29-external-runtimes.md ("ACP").

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version knife speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// Method names (client → agent requests and notifications).
pub mod methods {
    /// Request: version and capability negotiation.
    pub const INITIALIZE: &str = "initialize";
    /// Request: creates a session.
    pub const SESSION_NEW: &str = "session/new";
    /// Request: reopens a session; the agent replays its history as `session/update`s.
    pub const SESSION_LOAD: &str = "session/load";
    /// Request: reopens a session without a replay (`sessionCapabilities.resume`).
    pub const SESSION_RESUME: &str = "session/resume";
    /// Request: one prompt turn; answered when the turn ends.
    pub const SESSION_PROMPT: &str = "session/prompt";
    /// Notification: stop the running prompt turn.
    pub const SESSION_CANCEL: &str = "session/cancel";
    /// Request: frees a session (`sessionCapabilities.close`).
    pub const SESSION_CLOSE: &str = "session/close";
    /// Notification (agent → client): streamed progress of a session.
    pub const SESSION_UPDATE: &str = "session/update";
    /// Request (agent → client): asks the user to allow a tool call.
    pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";
}

/// `initialize` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeRequest {
    /// The protocol version knife speaks ([`PROTOCOL_VERSION`]).
    pub protocol_version: u16,
    /// What knife offers the agent (no file system, no terminal).
    pub client_capabilities: ClientCapabilities,
    /// knife's name and version; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<Implementation>,
}

/// What the client (knife) offers the agent. knife offers no file system and no
/// terminal: the agent uses its own tools inside the project's working directory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// File-system methods knife serves to the agent (none).
    pub fs: FileSystemCapabilities,
    /// Whether knife serves `terminal/*` methods (no).
    pub terminal: bool,
}

/// `clientCapabilities.fs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileSystemCapabilities {
    /// Whether knife serves `fs/read_text_file` (no).
    pub read_text_file: bool,
    /// Whether knife serves `fs/write_text_file` (no).
    pub write_text_file: bool,
}

/// Name and version of a client or an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    /// Program name (`knife`, `claude-agent-acp`, …).
    pub name: String,
    /// Its version; empty when the agent sends none.
    #[serde(default)]
    pub version: String,
    /// Display name; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// `initialize` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    /// The version the agent agreed to (knife refuses any other than 1).
    pub protocol_version: u16,
    /// What the agent supports.
    #[serde(default)]
    pub agent_capabilities: AgentCapabilities,
    /// Authentication methods the agent offers (kept as JSON; knife authenticates none).
    #[serde(default)]
    pub auth_methods: Vec<Value>,
    /// The agent's name and version, when it sends them.
    #[serde(default)]
    pub agent_info: Option<Implementation>,
}

/// What the agent can do (the fields knife reads).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// `session/load` is supported.
    #[serde(default)]
    pub load_session: bool,
    /// Which MCP transports the agent can connect to.
    #[serde(default)]
    pub mcp_capabilities: McpCapabilities,
    /// Which optional session methods the agent supports.
    #[serde(default)]
    pub session_capabilities: SessionCapabilities,
}

/// `agentCapabilities.mcpCapabilities`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpCapabilities {
    /// The agent accepts MCP servers over streamable HTTP (what knife's `/mcp` needs).
    #[serde(default)]
    pub http: bool,
    /// The agent accepts MCP servers over SSE.
    #[serde(default)]
    pub sse: bool,
}

/// `agentCapabilities.sessionCapabilities`: each present (an object, possibly
/// empty) means the method is supported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCapabilities {
    /// Present (any non-null value): `session/resume` is supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Value>,
    /// Present (any non-null value): `session/close` is supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close: Option<Value>,
}

impl SessionCapabilities {
    /// `session/resume` is supported.
    pub fn can_resume(&self) -> bool {
        self.resume.as_ref().is_some_and(|v| !v.is_null())
    }

    /// `session/close` is supported.
    pub fn can_close(&self) -> bool {
        self.close.as_ref().is_some_and(|v| !v.is_null())
    }
}

/// An MCP server the agent connects to for the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpServer {
    /// Streamable HTTP (`mcpCapabilities.http`).
    Http {
        /// Server name the agent shows (`knife`).
        name: String,
        /// The MCP endpoint URL (knife's `/mcp` on loopback).
        url: String,
        /// Headers to send, e.g. `Authorization: Bearer <thread credential>` (MCP-01).
        headers: Vec<HttpHeader>,
    },
}

/// One HTTP header of an MCP server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HttpHeader {
    /// Header name.
    pub name: String,
    /// Header value.
    pub value: String,
}

/// `session/new` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionRequest {
    /// Working directory of the session (absolute: the project root or the thread's worktree).
    pub cwd: PathBuf,
    /// MCP servers the agent should connect to (knife's `/mcp` when enabled).
    pub mcp_servers: Vec<McpServer>,
}

/// `session/new` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionResponse {
    /// The agent's session id; what every later request names.
    pub session_id: String,
}

/// `session/load` and `session/resume` params (same fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadSessionRequest {
    /// The agent's session id to reopen (the provider thread's native id).
    pub session_id: String,
    /// Working directory, as for `session/new`.
    pub cwd: PathBuf,
    /// MCP servers, as for `session/new` (fresh credentials).
    pub mcp_servers: Vec<McpServer>,
}

/// `session/prompt` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptRequest {
    /// The session to run the turn in.
    pub session_id: String,
    /// The user's message as content blocks (knife sends one text block).
    pub prompt: Vec<ContentBlock>,
}

/// `session/prompt` result: why the turn stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    /// Why the turn stopped.
    pub stop_reason: StopReason,
    /// Token usage of the turn, when the agent reports it (claude-agent-acp does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<PromptUsage>,
}

/// `session/prompt` result `usage` (tokens).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptUsage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Reasoning ("thought") tokens, when reported.
    #[serde(default)]
    pub thought_tokens: Option<u64>,
    /// Prompt tokens read from the cache, when reported.
    #[serde(default)]
    pub cached_read_tokens: Option<u64>,
    /// Total tokens.
    #[serde(default)]
    pub total_tokens: u64,
}

impl PromptUsage {
    /// knife's usage record of it.
    pub fn to_token_usage(&self) -> knife_protocol::TokenUsage {
        knife_protocol::TokenUsage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            reasoning_tokens: self.thought_tokens.unwrap_or(0),
            cached_input_tokens: self.cached_read_tokens.unwrap_or(0),
            total_tokens: self.total_tokens,
        }
    }
}

/// Why a prompt turn stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The agent finished its turn.
    EndTurn,
    /// The model hit its output token limit.
    MaxTokens,
    /// The agent hit its limit of model requests for one turn.
    MaxTurnRequests,
    /// The agent refused to go on.
    Refusal,
    /// The turn was cancelled (`session/cancel`).
    Cancelled,
    /// A reason this version of knife does not know.
    #[serde(other)]
    Other,
}

/// `session/cancel` and `session/close` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionIdParams {
    /// The session to cancel the turn of, or to close.
    pub session_id: String,
}

/// A piece of content (prompt, message chunk, tool output).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Images, audio, resources: kept out of knife's text transcript.
    #[serde(other)]
    Other,
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// The text of a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } => Some(text),
            ContentBlock::Other => None,
        }
    }
}

/// `session/update` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionNotification {
    /// The session the update belongs to.
    pub session_id: String,
    /// What happened.
    pub update: SessionUpdate,
}

/// One streamed update of a session (the variants knife maps; the rest is `Other`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub enum SessionUpdate {
    /// A chunk of the user's message (replayed by `session/load`).
    UserMessageChunk(ContentChunk),
    /// A chunk of the agent's answer text.
    AgentMessageChunk(ContentChunk),
    /// A chunk of the agent's reasoning.
    AgentThoughtChunk(ContentChunk),
    /// A new tool call.
    ToolCall(ToolCall),
    /// Changes to a known tool call.
    ToolCallUpdate(ToolCallUpdate),
    /// Plans, mode and command lists, usage, session info, …: not mapped.
    #[serde(other)]
    Other,
}

/// A chunk of a streamed message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentChunk {
    /// The chunk's content (text, or another block knife ignores).
    pub content: ContentBlock,
    /// Groups the chunks of one message, when the agent sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// Kind of tool, for the client's display (and knife's request kind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads files or data.
    Read,
    /// Changes files.
    Edit,
    /// Removes files.
    Delete,
    /// Moves or renames files.
    Move,
    /// Searches for information.
    Search,
    /// Runs a command.
    Execute,
    /// Thinks / plans (no side effect).
    Think,
    /// Fetches from the network.
    Fetch,
    /// Switches the agent's session mode.
    SwitchMode,
    /// Any other kind (the default, also for kinds knife does not know).
    #[default]
    #[serde(other)]
    Other,
}

impl ToolKind {
    /// The protocol's name of the kind (`execute`, `edit`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Read => "read",
            ToolKind::Edit => "edit",
            ToolKind::Delete => "delete",
            ToolKind::Move => "move",
            ToolKind::Search => "search",
            ToolKind::Execute => "execute",
            ToolKind::Think => "think",
            ToolKind::Fetch => "fetch",
            ToolKind::SwitchMode => "switch_mode",
            ToolKind::Other => "other",
        }
    }
}

/// Status of a tool call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// Not started yet (waiting for input or approval).
    #[default]
    Pending,
    /// Running.
    InProgress,
    /// Finished.
    Completed,
    /// Failed.
    Failed,
}

/// Content produced by a tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolCallContent {
    /// Ordinary content (text) the tool produced.
    Content {
        /// The content block.
        content: ContentBlock,
    },
    /// A file change, as old and new text.
    #[serde(rename_all = "camelCase")]
    Diff {
        /// The changed file (absolute).
        path: PathBuf,
        /// Its text before; `None` for a new file.
        #[serde(default)]
        old_text: Option<String>,
        /// Its text after.
        new_text: String,
    },
    /// Terminals and anything newer.
    #[serde(other)]
    Other,
}

/// `tool_call`: a new tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The agent's id of the call, unique in the session; updates name it.
    pub tool_call_id: String,
    /// Human title (`Run ls`, `Edit src/main.rs`); empty when not given.
    #[serde(default)]
    pub title: String,
    /// The tool's name, when the agent gives one (an extension of some agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Kind of tool, for display and the runtime request kind.
    #[serde(default)]
    pub kind: ToolKind,
    /// Where the call is.
    #[serde(default)]
    pub status: ToolCallStatus,
    /// What the tool produced so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ToolCallContent>,
    /// The tool's input as the agent passed it (JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// The tool's output as the agent got it (JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
    /// Extension data; knife reads claude-agent-acp's `claudeCode.toolName`
    /// ([`agent_tool_name`]).
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// `tool_call_update` (and the tool call of a permission request): only the fields
/// present change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    /// The call being updated.
    pub tool_call_id: String,
    /// New title, if changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// New name, if changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// New kind, if changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    /// New status, if changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    /// Content to replace the call's content with, if changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    /// Input, if now known or changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// Output, if now known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
    /// Extension data; knife reads claude-agent-acp's `claudeCode.toolName`
    /// ([`agent_tool_name`]).
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// The tool's own name from an agent's `_meta`, when the protocol's `name` is absent:
/// claude-agent-acp sends `{"claudeCode": {"toolName": "Bash"}}` (`Bash`,
/// `mcp__knife__threads_list`, …), more telling than the kind (`execute`, `other`).
pub fn agent_tool_name(meta: Option<&Value>) -> Option<String> {
    meta?
        .get("claudeCode")?
        .get("toolName")?
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}

/// `session/request_permission` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionRequest {
    /// The session asking.
    pub session_id: String,
    /// The tool call to allow (its fields as far as known).
    pub tool_call: ToolCallUpdate,
    /// The choices the agent offers.
    pub options: Vec<PermissionOption>,
}

/// One choice the agent offers in a permission request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    /// The agent's id of the choice; the answer names it.
    pub option_id: String,
    /// Label for people (`Allow`, `Always allow`…); empty when not given.
    #[serde(default)]
    pub name: String,
    /// What choosing it means.
    pub kind: PermissionOptionKind,
}

/// What choosing an option means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionOptionKind {
    /// Allow this call.
    AllowOnce,
    /// Allow this call and similar ones from now on.
    AllowAlways,
    /// Refuse this call.
    RejectOnce,
    /// Refuse this call and similar ones from now on.
    RejectAlways,
    /// A kind this version of knife does not know (never chosen).
    #[serde(other)]
    Other,
}

/// `session/request_permission` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestPermissionResponse {
    /// What the user chose.
    pub outcome: PermissionOutcome,
}

/// The user's choice, or `cancelled` when the turn was cancelled first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PermissionOutcome {
    /// The turn was cancelled before an answer (knife answers this on Stop first).
    Cancelled,
    /// The user chose an option.
    #[serde(rename_all = "camelCase")]
    Selected {
        /// The chosen option's id.
        option_id: String,
    },
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_mcp_server_entry_has_the_shape_real_agents_accept() {
        let server = McpServer::Http {
            name: "knife".into(),
            url: "http://127.0.0.1:7878/mcp".into(),
            headers: vec![HttpHeader {
                name: "Authorization".into(),
                value: "Bearer knife_mcp_x".into(),
            }],
        };
        assert_eq!(
            serde_json::to_value(&server).unwrap(),
            json!({"type": "http", "name": "knife", "url": "http://127.0.0.1:7878/mcp",
                   "headers": [{"name": "Authorization", "value": "Bearer knife_mcp_x"}]})
        );
    }

    #[test]
    fn unknown_updates_and_blocks_are_tolerated() {
        let plan: SessionNotification = serde_json::from_value(json!({
            "sessionId": "s", "update": {"sessionUpdate": "plan", "entries": []}
        }))
        .unwrap();
        assert_eq!(plan.update, SessionUpdate::Other);
        let image: SessionNotification = serde_json::from_value(json!({
            "sessionId": "s",
            "update": {"sessionUpdate": "agent_message_chunk",
                       "content": {"type": "image", "data": "", "mimeType": "image/png"}}
        }))
        .unwrap();
        assert!(matches!(
            image.update,
            SessionUpdate::AgentMessageChunk(ContentChunk {
                content: ContentBlock::Other,
                ..
            })
        ));
        let stop: PromptResponse =
            serde_json::from_value(json!({"stopReason": "something_new"})).unwrap();
        assert_eq!(stop.stop_reason, StopReason::Other);
        // claude-agent-acp's result, as captured.
        let done: PromptResponse = serde_json::from_value(json!({"stopReason": "end_turn",
            "usage": {"inputTokens": 642, "outputTokens": 7, "cachedReadTokens": 0,
                      "cachedWriteTokens": 0, "totalTokens": 649}}))
        .unwrap();
        let usage = done.usage.unwrap().to_token_usage();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.total_tokens),
            (642, 7, 649)
        );
    }

    #[test]
    fn a_permission_request_as_claude_agent_acp_sends_it_parses() {
        let req: RequestPermissionRequest = serde_json::from_value(json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "toolu_1", "title": "`ls -la`", "kind": "execute",
                         "rawInput": {"command": "ls -la"}},
            "options": [
                {"optionId": "allow_always", "name": "Always Allow", "kind": "allow_always"},
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"}
            ]
        }))
        .unwrap();
        assert_eq!(req.tool_call.kind, Some(ToolKind::Execute));
        assert_eq!(req.options[1].kind, PermissionOptionKind::AllowOnce);
        let answer = RequestPermissionResponse {
            outcome: PermissionOutcome::Selected {
                option_id: "allow".into(),
            },
        };
        assert_eq!(
            serde_json::to_value(answer).unwrap(),
            json!({"outcome": {"outcome": "selected", "optionId": "allow"}})
        );
        assert_eq!(
            serde_json::to_value(RequestPermissionResponse {
                outcome: PermissionOutcome::Cancelled
            })
            .unwrap(),
            json!({"outcome": {"outcome": "cancelled"}})
        );
    }
}
