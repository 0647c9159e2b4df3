//! A thread's message queue (TURN-01/02): how a message sent during a run is handled,
//! the entries waiting for the run to end (or to be steered into it) and the pause.

use crate::Timestamp;
use crate::ids::*;
use serde::{Deserialize, Serialize};

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
    /// Queue entry id, `queued_<uuid v7>`; what `DELETE /api/threads/{id}/queue/{entry}`
    /// names to cancel it.
    pub id: QueuedMessageId,
    /// The message text, as the user sent it; the user message of the run it starts.
    pub text: String,
    /// Model of the run it starts (TURN-10); `None` = the thread's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When the message was queued.
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
    /// What paused the queue.
    pub reason: QueuePauseReason,
    /// When the queue was paused.
    pub paused_at: Timestamp,
}

/// A thread's message queue (TURN-01/02): entries in arrival order (an
/// `interrupt`-mode message goes first) and the pause, if any.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MessageQueue {
    /// Waiting messages and undelivered steers, in the order they will start; at most
    /// [`QUEUE_MAX_ENTRIES`].
    #[serde(default)]
    pub entries: Vec<QueuedMessage>,
    /// Set while the queue is paused; `None` = entries start as runs end.
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
