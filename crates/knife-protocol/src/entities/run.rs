//! The run entity: one user request on a thread, its lifecycle status, its typed
//! failure and the token usage summed over its model calls.

use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Lifecycle of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted but not started. The runtime writes runs as `running` from
    /// `run.created` on, so knife itself does not produce this status today.
    Queued,
    /// Its turn is executing on a provider session.
    Running,
    /// The turn ended on its own (EXEC-01 `succeeded`).
    Completed,
    /// Stopped by an interrupt (user, superseded by a newer message, or a shutdown
    /// that a restart did not resume; EXEC-02); `error` names the reason.
    Interrupted,
    /// The turn failed; `error` says why (`provider.http`, `runtime`, `aborted`…).
    Failed,
    /// Cancelled without an interrupt. Part of the wire shape; the runtime ends
    /// stopped runs as `interrupted` and does not produce this status today.
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
    /// Stable dotted failure name (JSON `type`), e.g. `provider.http`, `interrupted`,
    /// `budget_exceeded`; clients branch on it, never on `message`.
    #[serde(rename = "type")]
    pub error_type: String,
    /// What happened and what the user can do, for people.
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
    /// Derived run id, `run:<thread id>:<ordinal>` ([`RunId::for_thread`]).
    pub id: RunId,
    /// The thread the run belongs to.
    pub thread_id: ThreadId,
    /// 1-based position of the run in its thread.
    pub ordinal: u32,
    /// The provider instance that executes the run (the thread's at the time).
    pub provider_instance_id: ProviderInstanceId,
    /// Model of this run (TURN-10); `None` = the provider instance's default.
    pub model: Option<String>,
    /// Where the run is in its lifecycle.
    pub status: RunStatus,
    /// The user-message turn item that opened this run.
    pub user_message_id: TurnItemId,
    /// When the user's message was accepted (`run.created`).
    pub requested_at: Timestamp,
    /// When its turn started; `None` only for a run that never started.
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status; `None` while queued or running.
    pub completed_at: Option<Timestamp>,
    /// Why it did not complete: set for `failed`, `interrupted`, `cancelled` and
    /// `budget_exceeded`; `None` for queued, running and completed runs.
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
    /// Prompt tokens sent to the model, cached ones included.
    pub input_tokens: u64,
    /// Tokens the model generated, reasoning included where the provider counts it so.
    pub output_tokens: u64,
    /// Reasoning ("thinking") tokens, when the provider reports them separately; else 0.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Input tokens served from the provider's prompt cache; 0 when not reported.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Total as the provider reports it (usually input + output).
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
