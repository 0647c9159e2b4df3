//! Per-model-call usage records (SPEC.md TURN-06): one [`ModelCall`] per model call of
//! a turn, for every driver, from which totals and budget sums are computed.

//! Where they come from: the built-in agent records each model call's reported usage
//! at its finish; codex each `thread/tokenUsage/updated` (the growth of the thread's
//! cumulative total since the previous report); an ACP agent its `session/prompt`
//! result's `usage` (one record per prompt turn, the finest it reports). A run that
//! ended with usage but no record of its own (a log from before these records) counts
//! as one record of its whole usage, id `run:<run id>`, added by the fold.

use serde::{Deserialize, Serialize};

use crate::ids::*;
use crate::{Timestamp, TokenUsage};

/// One model call's token usage (event `model-call.recorded`, TURN-06). Tokens, not bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelCall {
    /// `call:<provider turn id>:<n>` ([`ModelCall::id_of`]); `run:<run id>` for the
    /// whole usage of a run that has no per-call record ([`ModelCall::run_total_id`]).
    pub id: String,
    /// The thread of the call.
    pub thread_id: ThreadId,
    /// The run of the call.
    pub run_id: RunId,
    /// The turn the call belongs to (`None` for a run total).
    #[serde(default)]
    pub provider_turn_id: Option<ProviderTurnId>,
    /// The provider instance that served the call.
    pub provider_instance_id: ProviderInstanceId,
    /// The model the call ran on when the driver knows it; `None` = the instance's
    /// default model (priced as such).
    #[serde(default)]
    pub model: Option<String>,
    /// 1-based position of the call in its turn (0 for a run total).
    pub ordinal: u32,
    /// The call's tokens: input (cached included), output (reasoning included).
    pub usage: TokenUsage,
    /// When the call finished (the day budget counts calls by this instant).
    pub at: Timestamp,
}

impl ModelCall {
    /// The id of call `n` (1-based) of `turn`.
    pub fn id_of(turn: &ProviderTurnId, n: u32) -> String {
        format!("call:{turn}:{n}")
    }

    /// The id of the run-total record of `run`.
    pub fn run_total_id(run: &RunId) -> String {
        format!("run:{run}")
    }
}
