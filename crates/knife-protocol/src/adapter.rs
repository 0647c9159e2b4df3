//! Adapter events: what an agent runtime (built-in agent, codex, ACP) emits while
//! it works. The runtime's ingestor maps them 1:1 to domain events, except
//! `TurnTerminal`, which ends the turn (ARCHITECTURE.md "How a turn flows", step 4).

use crate::entities::*;
use crate::ids::*;
use serde::{Deserialize, Serialize};

/// How a provider turn ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The turn ended on its own.
    Completed,
    /// The turn was stopped (EXEC-02).
    Interrupted {
        /// `user`, `superseded` or `shutdown`.
        reason: String,
    },
    /// The turn failed.
    Failed {
        /// The typed failure, recorded on the run (EXEC-01).
        error: RunError,
    },
}

/// One event from an agent runtime, carrying a whole entity where it updates one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum AdapterEvent {
    /// The provider session's record changed (whole row); becomes `provider-session.updated`.
    ProviderSessionUpdated(ProviderSession),
    /// A provider thread's record changed (whole row); becomes `provider-thread.updated`.
    ProviderThreadUpdated(ProviderThread),
    /// A provider turn's record changed (whole row); becomes `provider-turn.updated`.
    ProviderTurnUpdated(ProviderTurn),
    /// A work-tree node changed (whole row); becomes `node.updated`.
    NodeUpdated(Node),
    /// A durable snapshot of a transcript item (whole item); becomes `turn-item.updated`.
    TurnItemUpdated(TurnItem),
    /// Durable text appended to a streaming item since its previous durable state
    /// (LIVE-03); becomes `turn-item.appended`. Only the one recorder emits it.
    TurnItemAppended(crate::live::TurnItemAppend),
    /// More streaming text of an item, handed to subscribers at once and never
    /// persisted (LIVE-01); the durable snapshots follow through `TurnItemUpdated`.
    TurnItemDelta(crate::live::ItemDelta),
    /// The item's live text is void (a discarded attempt, LIVE-01).
    TurnItemReset(crate::live::ItemReset),
    /// A runtime request was raised or changed (whole row); becomes
    /// `runtime-request.updated`.
    RuntimeRequestUpdated(RuntimeRequest),
    /// The agent's live status on a thread changed (PROC-06); becomes `thread.status`.
    AgentStatusChanged {
        /// The app thread the agent works on.
        thread_id: ThreadId,
        /// The run it works on; `None` between runs.
        run_id: Option<RunId>,
        /// The new status.
        status: AgentStatus,
    },
    /// The agent hit a named error (PROC-04, PROC-09); becomes `thread.error`.
    AgentErrorRaised {
        /// The app thread the agent works on.
        thread_id: ThreadId,
        /// The run that hit it; `None` outside a run.
        run_id: Option<RunId>,
        /// The named error (`MessageAbortedError`, `UnknownError`, …).
        error: AgentError,
    },
    /// The turn is over; no more items will come for it. Marks the turn idle (MGR-21).
    TurnTerminal {
        /// The app thread of the turn.
        thread_id: ThreadId,
        /// The run the turn executed.
        run_id: RunId,
        /// The provider turn that ended.
        provider_turn_id: ProviderTurnId,
        /// How it ended.
        outcome: TurnOutcome,
        /// Usage summed over the turn's model calls.
        #[serde(default)]
        usage: Option<TokenUsage>,
    },
}
