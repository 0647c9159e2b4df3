//! What a run produces: the nodes of its work tree and the transcript items (user and
//! assistant messages, reasoning, tool calls, approvals, errors, compactions) shown to people.

use super::{ApprovalDecision, RunError};
use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Kind of an execution node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// The root of a run's tree (`node:<run>:root`).
    RootTurn,
    /// An assistant message of the turn. Part of the wire shape: knife records
    /// messages, reasoning and tool calls as turn items, not nodes, today.
    AssistantMessage,
    /// A reasoning block of the turn (wire shape only, like `assistant_message`).
    Reasoning,
    /// A tool call of the turn (wire shape only, like `assistant_message`).
    ToolCall,
    /// A runtime request, child of the run's root (what knife records for every
    /// request today, user-input ones included).
    ApprovalRequest,
    /// A runtime request for free user input (wire shape only; see `approval_request`).
    UserInputRequest,
    /// Work knife itself did for the run (wire shape only; not written today).
    System,
}

/// Status of an execution node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// Recorded, not started (wire shape; the runtime writes roots `running`).
    Pending,
    /// In progress.
    Running,
    /// Blocked on the user (a pending runtime request).
    Waiting,
    /// Finished on its own.
    Completed,
    /// Stopped by an interrupt.
    Interrupted,
    /// Ended with an error (or its request expired, MGR-41).
    Failed,
    /// Abandoned (its turn stopped or its request was cancelled).
    Cancelled,
}

/// A node of the tree of work a run produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Node {
    /// Node id: `node:<run>:root` for a run's root ([`NodeId::root_of`]), else derived
    /// from what it records.
    pub id: NodeId,
    /// The app thread of the run.
    pub thread_id: ThreadId,
    /// The run; `None` for a request node emitted outside any run (MGR-43).
    pub run_id: Option<RunId>,
    /// The parent node; `None` for a root.
    pub parent_node_id: Option<NodeId>,
    /// The root of the tree (itself for a root).
    pub root_node_id: NodeId,
    /// What the node records.
    pub kind: NodeKind,
    /// Where its work is.
    pub status: NodeStatus,
    /// The provider turn it belongs to, when known.
    pub provider_turn_id: Option<ProviderTurnId>,
    /// The runtime request it records, for request nodes; `None` otherwise.
    pub runtime_request_id: Option<RuntimeRequestId>,
    /// When its work started; `None` while pending.
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status; `None` before.
    pub completed_at: Option<Timestamp>,
}

/// Status of a transcript item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnItemStatus {
    /// Started but not running yet (a tool call whose input is still streaming).
    Pending,
    /// Streaming or executing.
    Running,
    /// Blocked on the user (an approval, or a tool call waiting for one).
    Waiting,
    /// Finished.
    Completed,
    /// Ended with an error (a failed tool, an expired approval; PROC-08/13).
    Failed,
    /// Abandoned (the turn stopped before it ran; a cancelled approval).
    Cancelled,
    /// Cut short by an interrupt while streaming.
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
    /// The message that opened a run (or a steer delivered into it, TURN-01).
    UserMessage {
        /// The message text, as sent.
        text: String,
        /// Typed by the user, or written by knife.
        #[serde(default)]
        origin: MessageOrigin,
        /// Short label for system-originated messages ("Continuing after restart").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// Text the model wrote for the user.
    AssistantMessage {
        /// The text so far (whole once settled; LIVE-03 chunks append to it).
        text: String,
        /// True while more text may still arrive.
        streaming: bool,
    },
    /// The model's reasoning ("thinking") text, where the provider exposes it.
    Reasoning {
        /// The reasoning text so far.
        text: String,
        /// True while more text may still arrive.
        streaming: bool,
    },
    /// A call of a tool by the model, with its outcome once finished.
    ToolCall {
        /// The model's id for the call (matches the tool result sent back).
        call_id: String,
        /// The tool's name (`bash`, `edit`, an MCP tool, a codex command…).
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
    /// A failure shown in the transcript (the run's error).
    Error {
        /// The typed failure.
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
        /// The guarded call's tool name.
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
    /// Derived item id (`item:<provider turn>:<n>`, `item:<request id>`, …), stable
    /// across snapshots of the same item so replays upsert.
    pub id: TurnItemId,
    /// The app thread it belongs to.
    pub thread_id: ThreadId,
    /// The run it belongs to; `None` for items outside any run (MGR-43).
    pub run_id: Option<RunId>,
    /// The provider turn that produced it; `None` for the run's user message and
    /// items written by knife.
    pub provider_turn_id: Option<ProviderTurnId>,
    /// Position in the transcript: `run_ordinal * 1_000_000 + n` (n = 0 for the user message).
    pub ordinal: u64,
    /// Where the item is in its life.
    pub status: TurnItemStatus,
    /// When it started; `None` when not recorded.
    pub started_at: Option<Timestamp>,
    /// When it settled; `None` while pending, running or waiting.
    pub completed_at: Option<Timestamp>,
    /// When this snapshot of the item was written.
    pub updated_at: Timestamp,
    /// What the item holds (flattened: its `type` and fields sit beside these).
    #[serde(flatten)]
    pub kind: TurnItemKind,
}

impl TurnItem {
    /// Ordinal of the `n`-th item of run `run_ordinal` (see [`TurnItem::ordinal`]).
    pub fn ordinal_in_run(run_ordinal: u32, n: u64) -> u64 {
        u64::from(run_ordinal) * 1_000_000 + n
    }
}
