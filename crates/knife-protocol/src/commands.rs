//! Commands between knife nodes (SPEC.md SCALE-06): what a node that took an HTTP request
//! asks of the node driving the thread's run, and that node's answer, both as events.

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::api::RequestAnswer;
use crate::ids::*;

/// Event name of [`ThreadCommand`] (`EventBody::ThreadCommanded`).
pub const THREAD_COMMAND: &str = "thread.command";
/// Event name of [`ThreadCommandApplied`] (`EventBody::ThreadCommandApplied`).
pub const THREAD_COMMAND_APPLIED: &str = "thread.command_applied";

/// Event name of [`SessionCommand`] (`EventBody::SessionCommanded`).
pub const SESSION_COMMAND: &str = "session.command";
/// Event name of [`SessionCommandApplied`] (`EventBody::SessionCommandApplied`).
pub const SESSION_COMMAND_APPLIED: &str = "session.command_applied";

/// A command to whichever node drives run `run_id` of thread `thread_id` (SCALE-06),
/// appended to the event log by the node that took the request. The node driving
/// exactly that run applies it through the same code as a local request and answers
/// with a [`ThreadCommandApplied`]; every other node, and a later run of the thread,
/// ignores it (a stale command never acts on another run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadCommand {
    /// Command id (`command_…`); the applied answer names it in `command_id`.
    pub id: ThreadCommandId,
    /// The thread whose run it acts on.
    pub thread_id: ThreadId,
    /// The run it acts on.
    pub run_id: RunId,
    /// The node that took the HTTP request (its `[store] node_id`).
    pub from_node: String,
    /// When that node wrote it (its clock).
    pub issued_at: Timestamp,
    /// What is asked (flattened: `kind` and its fields sit beside these).
    #[serde(flatten)]
    pub action: CommandAction,
}

/// What a [`ThreadCommand`] asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CommandAction {
    /// Stop the run (`POST /api/threads/{id}/interrupt`, or a message with
    /// `mode = interrupt`: reason `superseded`).
    Interrupt {
        /// Why it stops: the user, or a newer message.
        reason: CommandInterruptReason,
    },
    /// Hand queue entry `entry_id` (already in the thread's queue as a steer of the
    /// run) to the running turn (a message with `mode = steer`).
    Steer {
        /// The queue entry (`queued_…`) whose text is the steer.
        entry_id: QueuedMessageId,
    },
    /// Answer runtime request `request_id` (a tool approval) with `answer`.
    AnswerRequest {
        /// The pending request to answer.
        request_id: RuntimeRequestId,
        /// The user's answer, as `POST /api/threads/{id}/requests/{request_id}` took it.
        answer: RequestAnswer,
    },
}

/// Why a commanded interrupt stops the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandInterruptReason {
    /// The user asked to stop (pauses the queue, TURN-02).
    User,
    /// A message sent with `mode = interrupt` replaces the run.
    Superseded,
}

/// The answer of the node that drove the run to a [`ThreadCommand`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadCommandApplied {
    /// The command this answers.
    pub command_id: ThreadCommandId,
    /// The command's thread.
    pub thread_id: ThreadId,
    /// The command's run.
    pub run_id: RunId,
    /// The node that applied it.
    pub node: String,
    /// When it applied it (its clock).
    pub applied_at: Timestamp,
    /// How it went (flattened: `outcome` and its fields sit beside these).
    #[serde(flatten)]
    pub outcome: CommandOutcome,
}

/// How a command went on the node driving the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CommandOutcome {
    /// Done: the run was asked to stop, the steer was handed to the turn, the answer
    /// was handed to the runtime.
    Applied,
    /// Refused, with the words a one-node answer would give (a steer the runtime
    /// cannot take was queued instead; an answer the runtime refused).
    Refused {
        /// Why, in the words a one-node answer would give.
        reason: String,
    },
}

/// A command to the node running provider session `provider_session_id` (SCALE-06: a
/// `POST /api/sessions/{id}/close` sent to another node), appended to the event log by
/// the node that took the request. Only node `node` (the one the session id names)
/// applies it, through the same code as a local request, and answers with a
/// [`SessionCommandApplied`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionCommand {
    /// Command id (`scommand_…`); the applied answer names it in `command_id`.
    pub id: SessionCommandId,
    /// The session it acts on.
    pub provider_session_id: ProviderSessionId,
    /// The node running the session (`ProviderSessionId::node`), the only one that
    /// applies the command.
    pub node: String,
    /// The node that took the HTTP request (its `[store] node_id`).
    pub from_node: String,
    /// When that node wrote it (its clock).
    pub issued_at: Timestamp,
    /// What is asked (flattened: `kind` and its fields sit beside these).
    #[serde(flatten)]
    pub action: SessionAction,
}

/// What a [`SessionCommand`] asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SessionAction {
    /// Release the session (reason `manual_shutdown`), as `POST
    /// /api/sessions/{id}/close` does on its own node.
    Close,
}

/// The answer of the node running the session to a [`SessionCommand`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionCommandApplied {
    /// The command this answers.
    pub command_id: SessionCommandId,
    /// The command's session.
    pub provider_session_id: ProviderSessionId,
    /// The node that applied it.
    pub node: String,
    /// When it applied it (its clock).
    pub applied_at: Timestamp,
    /// How it went (flattened: `outcome` and its fields sit beside these).
    #[serde(flatten)]
    pub outcome: SessionCommandOutcome,
}

/// How a [`SessionCommand`] went on the session's node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SessionCommandOutcome {
    /// Released (its `provider-session.updated` stopped is written).
    Closed,
    /// That node runs no such live session (any more).
    NotLive,
    /// The release failed.
    Failed {
        /// The error, in that node's words.
        reason: String,
    },
}
