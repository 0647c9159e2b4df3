//! Settlement by the one recorder: the end of a turn (every open item settled, the
//! provider turn's final state, one terminal) and the same on drop.

use knife_protocol::*;

use super::{TOOL_ABORTED, TurnRecorder};

impl TurnRecorder {
    /// Ends the turn because the session itself is lost (the process exited): like
    /// [`TurnRecorder::finish`], except that pending approvals stay `pending` and
    /// `live` — the manager's release of the failed session settles them `expired` /
    /// `not_resumable` (MGR-41), which tells whoever answers later why.
    pub fn finish_session_lost(&mut self, outcome: TurnOutcome) {
        self.forget_approvals();
        self.finish(outcome);
    }

    /// Ends the turn with `outcome`: cancels pending approvals, settles open items
    /// (text and others `completed`, or `interrupted` / `failed` with the turn; tools
    /// `failed` with an error saying why), emits the provider turn's final state,
    /// status `idle`, runs the finish hook, then one `TurnTerminal`. Later calls do
    /// nothing.
    pub fn finish(&mut self, outcome: TurnOutcome) {
        if self.finished {
            return;
        }
        self.cancel_approvals();
        let (item_status, turn_status, tool_error) = match &outcome {
            TurnOutcome::Completed => (
                TurnItemStatus::Completed,
                ProviderTurnStatus::Completed,
                self.style.unfinished_tool_error.to_owned(),
            ),
            TurnOutcome::Interrupted { .. } => (
                TurnItemStatus::Interrupted,
                ProviderTurnStatus::Interrupted,
                TOOL_ABORTED.to_owned(),
            ),
            TurnOutcome::Failed { error } => (
                TurnItemStatus::Failed,
                ProviderTurnStatus::Failed,
                format!(
                    "the turn failed before this tool call finished: {}",
                    error.message
                ),
            ),
        };
        // Items are settled (and so persisted) before the terminal event.
        for idx in 0..self.items.len() {
            if !self.is_open(idx) {
                continue;
            }
            let is_tool = matches!(
                self.item_at(idx).map(|i| &i.kind),
                Some(TurnItemKind::ToolCall { .. })
            );
            if is_tool {
                let output = match self.item_at(idx).map(|i| &i.kind) {
                    Some(TurnItemKind::ToolCall { output, .. }) => output.clone(),
                    _ => None,
                };
                self.settle_tool_at(
                    idx,
                    TurnItemStatus::Failed,
                    output,
                    Some(tool_error.clone()),
                );
            } else {
                self.settle_text(idx, None, item_status);
            }
        }
        self.finished = true;
        let now = self.clock.now();
        self.turn.status = turn_status;
        self.turn.completed_at = Some(now);
        self.publish_turn();
        self.set_status(AgentStatus::Idle);
        if let Some(hook) = self.on_finish.take() {
            hook();
        }
        self.send(AdapterEvent::TurnTerminal {
            thread_id: self.ids.thread_id.clone(),
            run_id: self.ids.run_id.clone(),
            provider_turn_id: self.ids.provider_turn_id.clone(),
            outcome,
            usage: self.turn.usage.clone(),
        });
    }
}

impl Drop for TurnRecorder {
    /// The turn task was aborted (or panicked) before finishing: settle everything
    /// as interrupted (`aborted`) so no item stays pending. Sending never blocks.
    fn drop(&mut self) {
        if !self.finished {
            self.finish(TurnOutcome::Interrupted {
                reason: "aborted".to_owned(),
            });
        }
    }
}
