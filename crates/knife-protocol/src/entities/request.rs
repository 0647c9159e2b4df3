//! Runtime requests: what a runtime asks the user mid-turn (command / file approval,
//! user input), whether the asking session can still take the answer, and the answer.

use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// Waiting for the user's answer.
    Pending,
    /// Answered; `decision` holds the answer.
    Resolved,
    /// The session that asked was released before an answer (MGR-41) or the server
    /// restarted under it; an answer now gets 409.
    Expired,
    /// The turn that asked stopped (interrupt, Stop) or its thread was deleted
    /// before an answer.
    Cancelled,
}

/// Whether the session that asked can still take the answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseCapability {
    /// The asking session is live: an answer is delivered to it.
    Live {
        /// The provider session that asked and waits for the answer.
        provider_session_id: ProviderSessionId,
    },
    /// The asking session is gone (released, crashed, restarted; MGR-41/39): no
    /// answer can reach it.
    NotResumable {
        /// Why, for people (e.g. the session was released or the server restarted).
        reason: String,
    },
}

/// A user's answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Allow this one call.
    AllowOnce,
    /// Allow this call and later calls of the same tool on the same subject (the
    /// built-in agent; codex `acceptForSession`).
    AllowAlways,
    /// Refuse the call; the runtime is told it was denied.
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
    /// Request id (`request_…`); answered at `POST /api/threads/{id}/requests/{request_id}`.
    pub id: RuntimeRequestId,
    /// The app thread whose turn asked.
    pub thread_id: ThreadId,
    /// `None` for requests emitted outside any run (MGR-43).
    pub run_id: Option<RunId>,
    /// The request's node in the run's work tree (kind `approval_request`).
    pub node_id: NodeId,
    /// The provider turn that asked; `None` outside any run (MGR-43).
    pub provider_turn_id: Option<ProviderTurnId>,
    /// What is asked: a command, a file read or change, or free input.
    pub kind: RuntimeRequestKind,
    /// Pending, answered, expired or cancelled.
    pub status: RuntimeRequestStatus,
    /// Whether the asking session can still take the answer.
    pub response_capability: ResponseCapability,
    /// What is asked, for the user (e.g. the command line).
    pub prompt: Option<String>,
    /// When the runtime asked.
    pub created_at: Timestamp,
    /// When it left `pending` (answered, expired or cancelled); `None` while pending.
    pub resolved_at: Option<Timestamp>,
    /// The user's answer; `None` until answered (and for expired / cancelled requests).
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
