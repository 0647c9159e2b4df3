//! What a [`super::FakeAdapter`] turn does on its own: nothing (the test pushes events),
//! a scripted answer and outcome, a wait for the test's release, or a panic.

use knife_protocol::*;
use knife_runtime::{AdapterError, StartTurnInput};
use tokio::sync::mpsc;

/// The plan of a fake turn, chosen per thread ([`super::FakeAdapter::plan`]) or for every
/// thread ([`super::FakeBehaviour::turns`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TurnPlan {
    /// `start_turn` accepts and emits nothing: the test drives the turn through
    /// [`super::FakeSessionControl::push`] (the session manager's tests).
    #[default]
    Manual,
    /// Plays the script right after `start_turn` accepted the turn.
    Script(TurnScript),
    /// Waits for [`super::FakeAdapter::release_turns`], then plays the script.
    Gated(TurnScript),
    /// `start_turn` panics (a defect in the runtime or the driver).
    Panic,
}

impl TurnPlan {
    /// One completed assistant message `done`, then `Completed`.
    pub fn complete() -> Self {
        Self::Script(TurnScript {
            answer: Some("done".into()),
            outcome: Some(TurnOutcome::Completed),
            ..TurnScript::default()
        })
    }

    /// Never ends on its own (an interrupt ends it when the adapter's
    /// [`super::FakeBehaviour::interrupt_ends_turn`] is set).
    pub fn hang() -> Self {
        Self::Script(TurnScript::default())
    }

    /// Ends `Failed` with `error` at once.
    pub fn fail(error: RunError) -> Self {
        Self::Script(TurnScript {
            outcome: Some(TurnOutcome::Failed { error }),
            ..TurnScript::default()
        })
    }

    /// Never ends on its own and `interrupt_turn` hangs forever (a deaf runtime).
    pub fn deaf() -> Self {
        Self::Script(TurnScript {
            deaf: true,
            ..TurnScript::default()
        })
    }

    pub(crate) fn is_deaf(&self) -> bool {
        matches!(self, Self::Script(s) | Self::Gated(s) if s.deaf)
    }
}

/// What a scripted fake turn emits, in order: the streaming snapshots, the completed
/// answer, then the terminal (or the end of the stream).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnScript {
    /// Texts of streaming (`running`) snapshots of the turn's assistant message (item 1).
    pub snapshots: Vec<String>,
    /// Text of the completed assistant message (item 1), after the snapshots.
    pub answer: Option<String>,
    /// The turn's outcome; `None` = the turn never ends on its own.
    pub outcome: Option<TurnOutcome>,
    /// Token usage on the terminal.
    pub usage: Option<TokenUsage>,
    /// A usage report (`ProviderTurnUpdated` with this usage) sent after the answer,
    /// as an external runtime reports usage mid-turn (TURN-07).
    pub reported_usage: Option<TokenUsage>,
    /// Ends the event stream after the snapshots and answer, with no terminal (the
    /// runtime's process died).
    pub end_stream: bool,
    /// `interrupt_turn` hangs forever while this turn runs.
    pub deaf: bool,
}

/// The `TurnTerminal` of `input` with `outcome` and `usage`.
pub fn terminal_of(
    input: &StartTurnInput,
    outcome: TurnOutcome,
    usage: Option<TokenUsage>,
) -> AdapterEvent {
    AdapterEvent::TurnTerminal {
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        provider_turn_id: input.provider_turn_id.clone(),
        outcome,
        usage,
    }
}

/// The assistant message (item 1 of the turn) of `input` with `text`.
pub fn assistant_item(input: &StartTurnInput, text: &str, done: bool) -> AdapterEvent {
    let now = chrono::Utc::now();
    AdapterEvent::TurnItemUpdated(TurnItem {
        id: TurnItemId::of_turn(&input.provider_turn_id, 1),
        thread_id: input.thread_id.clone(),
        run_id: Some(input.run_id.clone()),
        provider_turn_id: Some(input.provider_turn_id.clone()),
        ordinal: TurnItem::ordinal_in_run(input.run_ordinal, 1),
        status: if done {
            TurnItemStatus::Completed
        } else {
            TurnItemStatus::Running
        },
        started_at: Some(now),
        completed_at: done.then_some(now),
        updated_at: now,
        kind: TurnItemKind::AssistantMessage {
            text: text.to_owned(),
            streaming: !done,
        },
    })
}

pub(crate) type EventSender = mpsc::UnboundedSender<Result<AdapterEvent, AdapterError>>;

impl TurnScript {
    /// Sends the script's events for `input`; returns true when the stream must end.
    pub(crate) fn play(&self, input: &StartTurnInput, tx: &EventSender) -> bool {
        for text in &self.snapshots {
            let _ = tx.send(Ok(assistant_item(input, text, false)));
        }
        if let Some(text) = &self.answer {
            let _ = tx.send(Ok(assistant_item(input, text, true)));
        }
        if let Some(usage) = &self.reported_usage {
            let _ = tx.send(Ok(AdapterEvent::ProviderTurnUpdated(ProviderTurn {
                id: input.provider_turn_id.clone(),
                thread_id: input.thread_id.clone(),
                run_id: input.run_id.clone(),
                provider_thread_id: None,
                provider_session_id: ProviderSessionId::from("psession_fake"),
                node_id: NodeId::root_of(&input.run_id),
                ordinal: 1,
                status: ProviderTurnStatus::Running,
                started_at: chrono::Utc::now(),
                completed_at: None,
                usage: Some(usage.clone()),
                error: None,
                native_turn_id: None,
            })));
        }
        if self.end_stream {
            return true;
        }
        if let Some(outcome) = &self.outcome {
            let _ = tx.send(Ok(terminal_of(input, outcome.clone(), self.usage.clone())));
        }
        false
    }
}
