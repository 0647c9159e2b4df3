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
    Completed,
    Interrupted { reason: String },
    Failed { error: RunError },
}

/// One event from an agent runtime, carrying a whole entity where it updates one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum AdapterEvent {
    ProviderSessionUpdated(ProviderSession),
    ProviderThreadUpdated(ProviderThread),
    ProviderTurnUpdated(ProviderTurn),
    /// One model call of a turn finished with this usage (TURN-06); becomes
    /// `model-call.recorded`. Emitted through the recorder
    /// (`TurnRecorder::model_call`), before the turn's usage report.
    ModelCallRecorded(crate::ModelCall),
    NodeUpdated(Node),
    TurnItemUpdated(TurnItem),
    /// Durable text appended to a streaming item since its previous durable state
    /// (LIVE-03); becomes `turn-item.appended`. Only the one recorder emits it.
    TurnItemAppended(crate::live::TurnItemAppend),
    /// More streaming text of an item, handed to subscribers at once and never
    /// persisted (LIVE-01); the durable snapshots follow through `TurnItemUpdated`.
    TurnItemDelta(crate::live::ItemDelta),
    /// The item's live text is void (a discarded attempt, LIVE-01).
    TurnItemReset(crate::live::ItemReset),
    RuntimeRequestUpdated(RuntimeRequest),
    /// The agent's live status on a thread changed (PROC-06); becomes `thread.status`.
    AgentStatusChanged {
        thread_id: ThreadId,
        run_id: Option<RunId>,
        status: AgentStatus,
    },
    /// The agent hit a named error (PROC-04, PROC-09); becomes `thread.error`.
    AgentErrorRaised {
        thread_id: ThreadId,
        run_id: Option<RunId>,
        error: AgentError,
    },
    /// The turn is over; no more items will come for it. Marks the turn idle (MGR-21).
    TurnTerminal {
        thread_id: ThreadId,
        run_id: RunId,
        provider_turn_id: ProviderTurnId,
        outcome: TurnOutcome,
        /// Usage summed over the turn's model calls.
        #[serde(default)]
        usage: Option<TokenUsage>,
    },
}
