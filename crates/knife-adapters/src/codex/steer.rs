// Steering a running codex turn (SPEC.md TURN-01): a steer message goes to codex's
// `turn/steer` for the turn knife runs, and is recorded once codex took it.

//! codex checks `expectedTurnId` against its active turn and refuses otherwise (no
//! turn running, another turn, a turn that cannot take input); knife then answers
//! [`AdapterError::Refused`] with codex's reason, and execution queues the message with
//! a note saying so. A steer codex accepted is recorded as a completed user message with
//! the steer's item id ([`knife_protocol::TurnItemId::steer_of`]), which tells execution
//! it was delivered; codex's own `userMessage` item for it is ignored as every user
//! message is.

use knife_protocol::ThreadId;
use knife_runtime::{AdapterError, SteerInput};

use super::session::{Inner, lock};
use super::wire::{self, method};

impl Inner {
    /// Sends `steer` to the running turn of `thread` with `turn/steer`.
    ///
    /// Errors: [`AdapterError::Busy`] when no turn of `steer.run_id` runs on the
    /// thread in this session, when codex has not named the turn yet or when the turn
    /// is being interrupted; [`AdapterError::Refused`] when codex refuses (its
    /// message included).
    pub(super) async fn steer(
        &self,
        thread: &ThreadId,
        steer: SteerInput,
    ) -> Result<(), AdapterError> {
        let no_turn = || {
            AdapterError::Busy(format!(
                "no codex turn of run {} is running on thread {thread}",
                steer.run_id
            ))
        };
        let native = self.native_of(thread).ok_or_else(no_turn)?;
        let expected = {
            let mut st = lock(&self.state);
            let turn = st
                .turns
                .get_mut(&native)
                .filter(|t| t.recorder.ids().run_id == steer.run_id)
                .ok_or_else(no_turn)?;
            if turn.interrupt.is_some() {
                return Err(AdapterError::Busy(
                    "the codex turn is being interrupted".into(),
                ));
            }
            let expected = turn
                .native_turn
                .clone()
                .ok_or_else(|| AdapterError::Busy("codex has not started the turn yet".into()))?;
            // Until codex answers, the turn's end waits (TURN-02: a steer codex took
            // is recorded in this turn before it ends, so it is never queued again).
            turn.steers_in_flight += 1;
            expected
        };
        let params = wire::TurnSteerParams {
            thread_id: native.clone(),
            input: vec![wire::UserInput::Text {
                text: steer.text.clone(),
            }],
            expected_turn_id: expected.clone(),
        };
        let answer = self
            .rpc
            .call::<_, wire::TurnSteerResponse>(method::TURN_STEER, &params)
            .await;
        let mut st = lock(&self.state);
        let mut ended = None;
        if let Some(turn) = st
            .turns
            .get_mut(&native)
            .filter(|t| t.native_turn.as_deref() == Some(expected.as_str()))
        {
            turn.steers_in_flight = turn.steers_in_flight.saturating_sub(1);
            if answer.is_ok() {
                turn.recorder.steer_delivered(steer.item_id, &steer.text);
            }
            if turn.steers_in_flight == 0 {
                ended = turn.deferred_end.take();
            }
        }
        // The turn's `turn/completed` came while codex had not answered: it ends now,
        // after the steer's record.
        if let Some(n) = ended {
            self.end_turn(&mut st, n);
        }
        drop(st);
        answer.map(|_| ()).map_err(|e| AdapterError::Refused {
            operation: method::TURN_STEER,
            reason: format!("codex refused turn/steer: {e}"),
        })
    }
}
