//! The built-in agent's side of the one recorder (`knife_runtime::recording`, LIVE-05):
//! model parts and tool calls mapped onto it, plus what is the agent's own.
//!
//! Text windows, item ids and ordinals, tool and approval items, settlement on finish
//! and on drop are the shared recorder's. The agent keeps: its keys (a model step's
//! part and call ids, reset per step), turn-unique tool call ids, usage summed over
//! steps, discard-on-retry (PROC-03) and compaction items (PROC-07), and the
//! `MessageAbortedError` of a cancelled turn (PROC-09).

use std::time::Duration;

use knife_llm::Usage;
use knife_protocol::*;
use knife_runtime::recording::{self, ApprovalAsk, RecorderStyle, TextKind, TurnIds};
use knife_runtime::{AdapterError, SharedClock};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use crate::approvals::request_kind;
use crate::permissions::ApprovalRequest;
use crate::tools::ToolError;

/// Sender side of a session's adapter event stream.
pub(crate) type EventSender = UnboundedSender<Result<AdapterEvent, AdapterError>>;

/// Name of the error recorded on a turn's assistant message when the turn is
/// cancelled (PROC-09).
pub(crate) const MESSAGE_ABORTED: &str = "MessageAbortedError";

/// Error text of a tool call whose model call failed and was retried (PROC-03).
pub(crate) const DISCARDED: &str =
    "the model call that produced this tool call failed and was retried; it was not executed";

/// How a turn stopped early.
#[derive(Debug)]
pub(crate) enum TurnStop {
    /// Cancelled; the reason as stored (`user`, `superseded`, `shutdown`, `aborted`).
    Interrupted(String),
    Failed(RunError),
}

/// Text or reasoning part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PartKind {
    Text,
    Reasoning,
}

impl PartKind {
    fn key(self, part_id: &str) -> (String, TextKind) {
        match self {
            PartKind::Text => (format!("text:{part_id}"), TextKind::Assistant),
            PartKind::Reasoning => (format!("reasoning:{part_id}"), TextKind::Reasoning),
        }
    }
}

fn tool_key(call_id: &str) -> String {
    format!("tool:{call_id}")
}

/// Identity of the turn being recorded.
#[derive(Clone, Debug)]
pub(crate) struct TurnIdentity {
    pub thread_id: ThreadId,
    pub run_id: RunId,
    pub run_ordinal: u32,
    pub provider_turn_id: ProviderTurnId,
    pub provider_session_id: ProviderSessionId,
    pub attempt: u32,
    pub provider_instance_id: ProviderInstanceId,
    /// The model the turn's calls use.
    pub model: Option<String>,
}

/// Records one turn of the built-in agent; see the module docs.
pub(crate) struct TurnRecorder {
    core: recording::TurnRecorder,
    /// Usage summed over the turn's model steps.
    usage: Option<TokenUsage>,
    /// The approval the turn waits on, if any.
    approval: Option<RuntimeRequestId>,
}

impl TurnRecorder {
    /// Starts recording (emits the provider turn `running` and status `busy`).
    /// `on_finish` runs once, right before the terminal event.
    pub(crate) fn new(
        events: EventSender,
        clock: SharedClock,
        id: TurnIdentity,
        flush_interval: Duration,
        flush_bytes: usize,
        on_finish: Box<dyn FnOnce() + Send>,
    ) -> Self {
        let ids = TurnIds {
            thread_id: id.thread_id,
            run_id: id.run_id,
            run_ordinal: id.run_ordinal,
            provider_turn_id: id.provider_turn_id,
            provider_session_id: id.provider_session_id,
            attempt: id.attempt,
            provider_thread_id: None,
            provider_instance_id: id.provider_instance_id,
            model: id.model,
        };
        let style = RecorderStyle {
            flush_interval,
            flush_bytes,
            tool_after_approval: None,
            ..RecorderStyle::default()
        };
        let mut core = recording::TurnRecorder::start_with(events, clock, ids, style);
        core.on_finish(on_finish);
        Self {
            core,
            usage: None,
            approval: None,
        }
    }

    /// Wall-clock now, from the turn's clock.
    pub(crate) fn now(&self) -> Timestamp {
        self.core.now()
    }

    /// Publishes the agent status (PROC-06) when it differs from the last one.
    pub(crate) fn set_status(&mut self, status: AgentStatus) {
        self.core.set_status(status);
    }

    /// Records `error` on the turn's assistant message (the provider turn, emitted
    /// with the turn's final state) and publishes it (PROC-04, PROC-09); first wins.
    pub(crate) fn set_error(&mut self, error: AgentError) {
        self.core.set_error(error);
    }

    /// Position to come back to with [`Self::discard_since`]: the number of items so far.
    pub(crate) fn mark(&self) -> usize {
        self.core.item_count()
    }

    /// Throws away the items created since `mark` (a failed model call that is
    /// retried, PROC-03): each is emitted once more as `cancelled` with its text
    /// and output cleared, then a live reset (LIVE-01), then forgotten, so the
    /// retry's parts reuse the same ids and overwrite them. The failed attempt's
    /// text is never concatenated with the retry's.
    pub(crate) fn discard_since(&mut self, mark: usize) {
        for idx in mark..self.core.item_count() {
            self.core.revise(idx, |item| {
                item.status = TurnItemStatus::Cancelled;
                match &mut item.kind {
                    TurnItemKind::AssistantMessage { text, streaming }
                    | TurnItemKind::Reasoning { text, streaming } => {
                        text.clear();
                        *streaming = false;
                    }
                    TurnItemKind::ToolCall {
                        input,
                        output,
                        error,
                        ..
                    } => {
                        *input = Value::String(String::new());
                        *output = None;
                        *error = Some(DISCARDED.to_owned());
                    }
                    _ => {}
                }
            });
            self.core.reset_live(idx);
        }
        self.core.truncate(mark);
    }

    /// A model step finished with `usage`: adds it to the turn and emits the turn
    /// with the new total, so a step's usage is durable as soon as it ends (PROC-02).
    pub(crate) fn step_finished(&mut self, usage: Option<&Usage>) {
        if let Some(usage) = usage {
            let step = TokenUsage {
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                reasoning_tokens: usage.reasoning_tokens,
                cached_input_tokens: usage.cached_input_tokens,
                total_tokens: usage.total_tokens,
            };
            // TURN-06: the call's own record, stored before the usage report below.
            self.core.model_call(step.clone(), None);
            self.usage
                .get_or_insert_with(TokenUsage::default)
                .add(&step);
        }
        if let Some(total) = self.usage.clone() {
            self.core.set_usage(total);
        }
        self.core.publish_turn();
    }

    /// The turn's token usage so far (summed over its finished model calls).
    pub(crate) fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    /// A steer the turn takes before its next model call (TURN-01): a completed
    /// user-message item with the steer's own id (`TurnItemId::steer_of`), which
    /// tells execution it was delivered.
    pub(crate) fn steer_delivered(&mut self, id: TurnItemId, text: &str) {
        self.core.steer_delivered(id, text);
    }

    /// A compaction starts: creates its item (running, empty summary) and emits it.
    pub(crate) fn compaction_start(&mut self) -> usize {
        let idx = self.core.open_item(
            None,
            TurnItemKind::Compaction {
                summary: String::new(),
            },
            TurnItemStatus::Running,
        );
        self.core.emit(idx);
        idx
    }

    /// The compaction `idx` ended: completed with `summary`, or failed.
    pub(crate) fn compaction_finished(&mut self, idx: usize, summary: Option<String>) {
        self.core.update(idx, false, |item| {
            item.status = match &summary {
                Some(_) => TurnItemStatus::Completed,
                None => TurnItemStatus::Failed,
            };
            if let (TurnItemKind::Compaction { summary: slot }, Some(text)) =
                (&mut item.kind, summary)
            {
                *slot = text;
            }
        });
    }

    /// A text or reasoning part started: creates its item and emits it (empty, streaming).
    pub(crate) fn part_start(&mut self, kind: PartKind, part_id: &str) {
        let (key, text) = kind.key(part_id);
        self.core.text_started(&key, text);
    }

    /// Appends `delta` to the part's item (created if no start was seen): live at
    /// once, the snapshot when the window allows.
    pub(crate) fn part_delta(&mut self, kind: PartKind, part_id: &str, delta: &str) {
        let (key, text) = kind.key(part_id);
        self.core.text_delta(&key, text, delta);
    }

    /// The part ended: its item stops streaming, is completed and emitted.
    pub(crate) fn part_end(&mut self, kind: PartKind, part_id: &str) {
        let (key, _) = kind.key(part_id);
        self.core.text_ended(&key, TurnItemStatus::Completed);
    }

    /// When the driver must call [`Self::flush_due`] next, if some text is unsent.
    pub(crate) fn next_flush_deadline(&self) -> Option<Instant> {
        self.core.next_flush_deadline()
    }

    /// Emits every item whose unsent text has waited the window.
    pub(crate) fn flush_due(&mut self) {
        self.core.flush_due();
    }

    /// The item of the current step's tool call `call_id` (the provider's id),
    /// created on first sight (pending, not emitted). The item's call id is unique
    /// within the turn: a provider id seen in an earlier step (servers that invent
    /// `call-0` for every step) becomes `call-0_2`, `call-0_3`, … (`_`, not `#`:
    /// Anthropic accepts only `[A-Za-z0-9_-]` in tool ids).
    fn tool(&mut self, call_id: &str, name: &str) -> usize {
        let key = tool_key(call_id);
        if let Some(idx) = self.core.index_of(&key) {
            return idx;
        }
        let unique = if self.core.call_id_taken(call_id) {
            (2u32..)
                .map(|n| format!("{call_id}_{n}"))
                .find(|id| !self.core.call_id_taken(id))
                .unwrap_or_else(|| call_id.to_owned())
        } else {
            call_id.to_owned()
        };
        self.core.open_tool(
            &key,
            &unique,
            name,
            Value::String(String::new()),
            TurnItemStatus::Pending,
        )
    }

    /// The model started a tool call: creates its item (pending) and emits it.
    pub(crate) fn tool_input_start(&mut self, call_id: &str, name: &str) {
        if self.core.has_item(&tool_key(call_id)) {
            return;
        }
        let idx = self.tool(call_id, name);
        self.core.emit(idx);
    }

    /// More argument text of a tool call (live only; input is durable once complete).
    pub(crate) fn tool_input_delta(&mut self, call_id: &str, delta: &str) {
        let idx = self.tool(call_id, "");
        self.core.tool_input_delta(idx, delta);
    }

    /// The complete tool call: sets its input (parsed JSON when valid, else the raw
    /// string) and emits it, still pending. Returns the item's index.
    pub(crate) fn tool_call(&mut self, call_id: &str, name: &str, input: Value) -> usize {
        let idx = self.tool(call_id, name);
        self.core.tool_input_complete(idx, name, input);
        idx
    }

    /// The turn-unique call id of the tool item `idx`: the id the conversation sent
    /// back to the model must use, so each call pairs with its own result.
    pub(crate) fn tool_call_id(&self, idx: usize) -> Option<String> {
        match &self.core.item_at(idx)?.kind {
            TurnItemKind::ToolCall { call_id, .. } => Some(call_id.clone()),
            _ => None,
        }
    }

    /// The tool call starts executing.
    pub(crate) fn tool_running(&mut self, idx: usize) {
        self.core.set_item_status(idx, TurnItemStatus::Running);
    }

    /// More output of running tool call `idx` (e.g. `bash` stdout/stderr): live at
    /// once, durable per window (LIVE-02, LIVE-03).
    pub(crate) fn tool_output(&mut self, idx: usize, text: &str) {
        self.core.tool_output_delta(idx, text);
    }

    /// The tool call finished: completed with `output`, or failed with the error text.
    pub(crate) fn tool_finished(&mut self, idx: usize, result: &Result<String, ToolError>) {
        match result {
            Ok(out) => {
                self.core
                    .settle_tool_at(idx, TurnItemStatus::Completed, Some(out.clone()), None)
            }
            Err(e) => {
                // What the tool streamed before it failed (a `bash` command stopped or
                // timed out) stays on the item: the user saw it live (LIVE-02).
                let streamed = match self.core.item_at(idx).map(|i| &i.kind) {
                    Some(TurnItemKind::ToolCall {
                        output: Some(out), ..
                    }) if !out.is_empty() => Some(out.clone()),
                    _ => None,
                };
                self.core
                    .settle_tool_at(idx, TurnItemStatus::Failed, streamed, Some(e.to_string()))
            }
        }
    }

    /// The model step ended: parts still open are completed; tool calls whose
    /// input never completed are failed (they will not be executed).
    pub(crate) fn end_step(&mut self) {
        for idx in 0..self.core.item_count() {
            if !self.core.is_open(idx) {
                continue;
            }
            match self.core.item_at(idx).map(|i| &i.kind) {
                Some(TurnItemKind::ToolCall { .. }) if !self.core.tool_input_is_complete(idx) => {
                    self.core.settle_tool_at(
                        idx,
                        TurnItemStatus::Failed,
                        None,
                        Some(
                            "the model's response ended before this tool call's input was \
                             complete"
                                .into(),
                        ),
                    )
                }
                Some(TurnItemKind::AssistantMessage { .. } | TurnItemKind::Reasoning { .. }) => {
                    self.core.settle_text(idx, None, TurnItemStatus::Completed)
                }
                _ => {}
            }
        }
        // Provider part and call ids are per step: the next step may reuse one.
        self.core.forget_keys();
    }

    /// The turn starts waiting on approval `id` for the call of tool item
    /// `tool_idx`: approval node and item `waiting`, the tool `waiting`, the
    /// request `pending` (live on this session).
    pub(crate) fn approval_requested(
        &mut self,
        tool_idx: usize,
        ask: &ApprovalRequest,
        id: &RuntimeRequestId,
        mutating: bool,
    ) {
        let ask = ApprovalAsk {
            kind: request_kind(&ask.tool, mutating),
            call_id: ask.call_id.clone(),
            tool: ask.tool.clone(),
            subject: ask.subject.clone(),
            input: ask.input.clone(),
            rule: ask.rule.clone(),
            diff: ask.diff.clone(),
        };
        self.core.approval_requested_for(id, ask, Some(tool_idx));
        self.approval = Some(id.clone());
    }

    /// The user answered the pending approval: request `resolved` with the
    /// decision (and message), node and item `completed`.
    pub(crate) fn approval_answered(&mut self, answer: &RequestAnswer) {
        if let Some(id) = self.approval.take() {
            self.core.approval_answered(&id, answer);
        }
    }

    /// Ends the turn: a cancelled turn first records `MessageAbortedError` (PROC-09);
    /// then the shared recorder settles open items (an approval still waiting is
    /// cancelled), emits the provider turn's final state and exactly one
    /// `TurnTerminal`. Later calls do nothing.
    pub(crate) fn finish(&mut self, result: Result<(), TurnStop>) {
        if self.core.is_finished() {
            return;
        }
        let outcome = match result {
            Ok(()) => TurnOutcome::Completed,
            Err(TurnStop::Interrupted(reason)) => {
                self.set_error(AgentError {
                    name: MESSAGE_ABORTED.to_owned(),
                    message: format!("the turn was aborted ({reason})"),
                });
                TurnOutcome::Interrupted { reason }
            }
            Err(TurnStop::Failed(error)) => TurnOutcome::Failed { error },
        };
        self.core.finish(outcome);
    }
}

impl Drop for TurnRecorder {
    /// The turn task was aborted (or panicked) before finishing: settle everything
    /// as interrupted, with the turn's `MessageAbortedError` (PROC-09).
    fn drop(&mut self) {
        self.finish(Err(TurnStop::Interrupted("aborted".to_owned())));
    }
}

#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;
