//! The turn recorder: owns the turn items of one provider turn, emits their
//! snapshots (throttled while text streams) and settles them when the turn ends.
//!
//! Every snapshot carries the whole [`TurnItem`]. Text and reasoning snapshots are
//! throttled per item: an update is emitted at once when the item's last emit was
//! at least `flush_interval` ago or `flush_bytes` arrived since, otherwise the
//! driver must call [`TurnRecorder::flush_due`] by [`TurnRecorder::next_flush_deadline`].
//! Dropping an unfinished recorder (the turn task was aborted) still settles every
//! open item as interrupted and emits the turn's terminal event, so nothing is
//! ever left pending.

use std::collections::HashMap;
use std::time::Duration;

use knife_llm::Usage;
use knife_protocol::*;
use knife_runtime::{AdapterError, SharedClock, recording};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use crate::tools::ToolError;

mod approval;

/// Sender side of a session's adapter event stream.
pub(crate) type EventSender = UnboundedSender<Result<AdapterEvent, AdapterError>>;

/// Error text of a tool call stopped by an interrupt (PROC-08).
pub(crate) const TOOL_ABORTED: &str = "Tool execution aborted";
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

/// Identity of the turn being recorded.
#[derive(Clone, Debug)]
pub(crate) struct TurnIdentity {
    pub thread_id: ThreadId,
    pub run_id: RunId,
    pub run_ordinal: u32,
    pub provider_turn_id: ProviderTurnId,
    pub provider_session_id: ProviderSessionId,
    pub attempt: u32,
}

struct ItemState {
    item: TurnItem,
    /// Still changing (text streaming, tool not finished).
    open: bool,
    last_emit: Option<Instant>,
    unsent_bytes: usize,
    dirty: bool,
    /// Tool call arguments streamed so far (tool items only).
    raw_input: String,
    /// The complete tool call arrived (tool items only).
    input_complete: bool,
}

/// Label of a user message a running turn took as a steer (TURN-01).
pub(crate) const STEER_DESCRIPTION: &str = "Sent during the run";

/// Records one provider turn; see the module docs.
pub(crate) struct TurnRecorder {
    events: EventSender,
    clock: SharedClock,
    id: TurnIdentity,
    turn: ProviderTurn,
    items: Vec<ItemState>,
    parts: HashMap<(PartKind, String), usize>,
    tools: HashMap<String, usize>,
    flush_interval: Duration,
    flush_bytes: usize,
    usage: Option<TokenUsage>,
    /// The agent status last published (PROC-06); `None` before the first.
    status: Option<AgentStatus>,
    finished: bool,
    /// Runs once, right before the terminal event (frees the session's turn slot).
    on_finish: Option<Box<dyn FnOnce() + Send>>,
    /// The tool approval the turn waits on, if any.
    approval: Option<approval::PendingApproval>,
}

impl TurnRecorder {
    pub(crate) fn new(
        events: EventSender,
        clock: SharedClock,
        id: TurnIdentity,
        flush_interval: Duration,
        flush_bytes: usize,
        on_finish: Box<dyn FnOnce() + Send>,
    ) -> Self {
        let now = clock.now();
        let turn = ProviderTurn {
            id: id.provider_turn_id.clone(),
            thread_id: id.thread_id.clone(),
            run_id: id.run_id.clone(),
            provider_thread_id: None,
            provider_session_id: id.provider_session_id.clone(),
            node_id: NodeId::root_of(&id.run_id),
            ordinal: id.attempt,
            status: ProviderTurnStatus::Running,
            started_at: now,
            completed_at: None,
            usage: None,
            error: None,
            native_turn_id: None,
        };
        Self {
            events,
            clock,
            id,
            turn,
            items: Vec::new(),
            parts: HashMap::new(),
            tools: HashMap::new(),
            flush_interval,
            flush_bytes: flush_bytes.max(1),
            usage: None,
            status: None,
            finished: false,
            on_finish: Some(on_finish),
            approval: None,
        }
    }

    fn send(&self, event: AdapterEvent) {
        // The receiver is gone only when the session's stream was dropped; the
        // turn then has nobody to report to and finishes quietly.
        let _ = self.events.send(Ok(event));
    }

    /// Emits the provider turn as running.
    pub(crate) fn start(&self) {
        self.send(AdapterEvent::ProviderTurnUpdated(self.turn.clone()));
    }

    /// Wall-clock now, from the turn's clock.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Publishes the agent status (PROC-06) when it differs from the last one.
    pub(crate) fn set_status(&mut self, status: AgentStatus) {
        if self.status.as_ref() == Some(&status) {
            return;
        }
        self.status = Some(status.clone());
        self.send(AdapterEvent::AgentStatusChanged {
            thread_id: self.id.thread_id.clone(),
            run_id: Some(self.id.run_id.clone()),
            status,
        });
    }

    /// Records `error` on the turn's assistant message (the provider turn, emitted
    /// with the turn's final state) and publishes it as an error event
    /// (PROC-04, PROC-09). The first error recorded wins.
    pub(crate) fn set_error(&mut self, error: AgentError) {
        if self.turn.error.is_some() {
            return;
        }
        self.turn.error = Some(error.clone());
        self.send(AdapterEvent::AgentErrorRaised {
            thread_id: self.id.thread_id.clone(),
            run_id: Some(self.id.run_id.clone()),
            error,
        });
    }

    /// Position to come back to with [`Self::discard_since`]: the number of items so far.
    pub(crate) fn mark(&self) -> usize {
        self.items.len()
    }

    /// Throws away the items created since `mark` (a failed model call that is
    /// retried, PROC-03): each is emitted once more as `cancelled` with its text
    /// and output cleared, then forgotten, so the retry's parts reuse the same
    /// ids and overwrite them. The failed attempt's text is never concatenated
    /// with the retry's.
    pub(crate) fn discard_since(&mut self, mark: usize) {
        for idx in mark..self.items.len() {
            let state = &mut self.items[idx];
            state.open = false;
            state.dirty = false;
            state.item.status = TurnItemStatus::Cancelled;
            match &mut state.item.kind {
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
            self.emit(idx);
            // After the voiding snapshot: subscribers drop the attempt's live text,
            // and the retry's deltas (same item id) start again at 0 (LIVE-01).
            if let Some(state) = self.items.get(idx) {
                self.send(recording::reset(&state.item));
            }
        }
        self.items.truncate(mark);
        self.parts.retain(|_, idx| *idx < mark);
        self.tools.retain(|_, idx| *idx < mark);
    }

    /// A model step finished with `usage`: adds it to the turn and emits the turn
    /// with the new total, so a step's usage is durable as soon as it ends (PROC-02).
    pub(crate) fn step_finished(&mut self, usage: Option<&Usage>) {
        if let Some(usage) = usage {
            self.add_usage(usage);
        }
        self.turn.usage = self.usage.clone();
        self.send(AdapterEvent::ProviderTurnUpdated(self.turn.clone()));
    }

    /// A compaction starts: creates its item (running, empty summary) and emits it.
    pub(crate) fn compaction_start(&mut self) -> usize {
        let idx = self.new_item(
            TurnItemKind::Compaction {
                summary: String::new(),
            },
            TurnItemStatus::Running,
        );
        self.emit(idx);
        idx
    }

    /// The compaction `idx` ended: completed with `summary`, or failed.
    pub(crate) fn compaction_finished(&mut self, idx: usize, summary: Option<String>) {
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        state.open = false;
        state.item.status = match &summary {
            Some(_) => TurnItemStatus::Completed,
            None => TurnItemStatus::Failed,
        };
        if let (TurnItemKind::Compaction { summary: slot }, Some(text)) =
            (&mut state.item.kind, summary)
        {
            *slot = text;
        }
        self.emit(idx);
    }

    /// The turn's token usage so far (summed over its finished model calls).
    pub(crate) fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    /// A steer the turn takes before its next model call (TURN-01): a completed
    /// user-message item with the steer's own id (`TurnItemId::steer_of`), which
    /// tells execution it was delivered.
    pub(crate) fn steer_delivered(&mut self, id: TurnItemId, text: &str) {
        let idx = self.new_item(
            TurnItemKind::UserMessage {
                text: text.to_owned(),
                origin: MessageOrigin::User,
                description: Some(STEER_DESCRIPTION.to_owned()),
            },
            TurnItemStatus::Completed,
        );
        if let Some(state) = self.items.get_mut(idx) {
            state.item.id = id;
            state.open = false;
        }
        self.emit(idx);
    }

    fn new_item(&mut self, kind: TurnItemKind, status: TurnItemStatus) -> usize {
        let n = self.items.len() as u64 + 1;
        let now = self.clock.now();
        let item = TurnItem {
            id: TurnItemId::of_turn(&self.id.provider_turn_id, n as u32),
            thread_id: self.id.thread_id.clone(),
            run_id: Some(self.id.run_id.clone()),
            provider_turn_id: Some(self.id.provider_turn_id.clone()),
            ordinal: TurnItem::ordinal_in_run(self.id.run_ordinal, n),
            status,
            started_at: Some(now),
            completed_at: None,
            updated_at: now,
            kind,
        };
        self.items.push(ItemState {
            item,
            open: true,
            last_emit: None,
            unsent_bytes: 0,
            dirty: false,
            raw_input: String::new(),
            input_complete: false,
        });
        self.items.len() - 1
    }

    fn emit(&mut self, idx: usize) {
        let now = self.clock.now();
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        state.item.updated_at = now;
        if !state.open && state.item.completed_at.is_none() {
            state.item.completed_at = Some(now);
        }
        state.last_emit = Some(Instant::now());
        state.unsent_bytes = 0;
        state.dirty = false;
        let snapshot = state.item.clone();
        self.send(AdapterEvent::TurnItemUpdated(snapshot));
    }

    fn part(&mut self, kind: PartKind, part_id: &str) -> usize {
        if let Some(&idx) = self.parts.get(&(kind, part_id.to_owned())) {
            return idx;
        }
        let item_kind = match kind {
            PartKind::Text => TurnItemKind::AssistantMessage {
                text: String::new(),
                streaming: true,
            },
            PartKind::Reasoning => TurnItemKind::Reasoning {
                text: String::new(),
                streaming: true,
            },
        };
        let idx = self.new_item(item_kind, TurnItemStatus::Running);
        self.parts.insert((kind, part_id.to_owned()), idx);
        idx
    }

    /// A text or reasoning part started: creates its item and emits it (empty, streaming).
    pub(crate) fn part_start(&mut self, kind: PartKind, part_id: &str) {
        if self.parts.contains_key(&(kind, part_id.to_owned())) {
            return;
        }
        let idx = self.part(kind, part_id);
        self.emit(idx);
    }

    /// Appends `delta` to the part's item (creating it if no start was seen) and
    /// emits a snapshot when the throttle allows (leading edge or byte threshold).
    pub(crate) fn part_delta(&mut self, kind: PartKind, part_id: &str, delta: &str) {
        let idx = self.part(kind, part_id);
        let now = Instant::now();
        let interval = self.flush_interval;
        let flush_bytes = self.flush_bytes;
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        if !state.open {
            return;
        }
        let Some(field) = recording::text_field(&state.item.kind) else {
            return;
        };
        let offset = match &mut state.item.kind {
            TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } => {
                let offset = text.len();
                text.push_str(delta);
                offset
            }
            _ => return,
        };
        // Live at once (LIVE-01); the snapshot follows the persistence window.
        let _ = self
            .events
            .send(Ok(recording::delta(&state.item, field, offset, delta)));
        state.unsent_bytes += delta.len();
        state.dirty = true;
        let due = state
            .last_emit
            .is_none_or(|last| now.duration_since(last) >= interval);
        if due || state.unsent_bytes >= flush_bytes {
            self.emit(idx);
        }
    }

    /// The part ended: its item stops streaming, is completed and emitted.
    pub(crate) fn part_end(&mut self, kind: PartKind, part_id: &str) {
        let idx = self.part(kind, part_id);
        self.close_part(idx, TurnItemStatus::Completed);
    }

    fn close_part(&mut self, idx: usize, status: TurnItemStatus) {
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        if !state.open {
            return;
        }
        state.open = false;
        state.item.status = status;
        if let TurnItemKind::AssistantMessage { streaming, .. }
        | TurnItemKind::Reasoning { streaming, .. } = &mut state.item.kind
        {
            *streaming = false;
        }
        self.emit(idx);
    }

    /// When the driver must call [`Self::flush_due`] next, if some text is unsent.
    pub(crate) fn next_flush_deadline(&self) -> Option<Instant> {
        self.items
            .iter()
            .filter(|s| s.dirty && s.open)
            .filter_map(|s| s.last_emit.map(|last| last + self.flush_interval))
            .min()
    }

    /// Emits every item whose unsent text has waited `flush_interval`.
    pub(crate) fn flush_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = (0..self.items.len())
            .filter(|&i| {
                let s = &self.items[i];
                s.dirty
                    && s.open
                    && s.last_emit
                        .is_none_or(|last| now.duration_since(last) >= self.flush_interval)
            })
            .collect();
        for idx in due {
            self.emit(idx);
        }
    }

    /// The item of the current step's tool call `call_id` (the provider's id),
    /// created on first sight. The item's call id is unique within the turn: a
    /// provider id seen in an earlier step (servers that invent `call-0` for
    /// every step) becomes `call-0_2`, `call-0_3`, … ([`Self::tool_call_id`]; `_`,
    /// not `#`: Anthropic accepts only `[A-Za-z0-9_-]` in tool ids).
    fn tool(&mut self, call_id: &str, name: &str) -> usize {
        if let Some(&idx) = self.tools.get(call_id) {
            return idx;
        }
        let taken = |id: &str| {
            self.items.iter().any(|s| {
                matches!(&s.item.kind, TurnItemKind::ToolCall { call_id: used, .. } if used == id)
            })
        };
        let unique = if taken(call_id) {
            (2u32..)
                .map(|n| format!("{call_id}_{n}"))
                .find(|id| !taken(id))
                .unwrap_or_else(|| call_id.to_owned())
        } else {
            call_id.to_owned()
        };
        let kind = TurnItemKind::ToolCall {
            call_id: unique,
            tool: name.to_owned(),
            input: Value::String(String::new()),
            output: None,
            error: None,
        };
        let idx = self.new_item(kind, TurnItemStatus::Pending);
        self.tools.insert(call_id.to_owned(), idx);
        idx
    }

    /// The model started a tool call: creates its item (pending) and emits it.
    pub(crate) fn tool_input_start(&mut self, call_id: &str, name: &str) {
        if self.tools.contains_key(call_id) {
            return;
        }
        let idx = self.tool(call_id, name);
        self.emit(idx);
    }

    /// More argument text of a tool call (kept, not emitted: input is shown once complete).
    pub(crate) fn tool_input_delta(&mut self, call_id: &str, delta: &str) {
        let idx = self.tool(call_id, "");
        if let Some(state) = self.items.get_mut(idx) {
            let offset = state.raw_input.len();
            state.raw_input.push_str(delta);
            if !state.input_complete && !delta.is_empty() {
                // Live only (LIVE-01): the durable item shows the input once complete.
                let _ = self.events.send(Ok(recording::delta(
                    &state.item,
                    DeltaField::Input,
                    offset,
                    delta,
                )));
            }
        }
    }

    /// The complete tool call: sets its input (parsed JSON when valid, else the raw
    /// string) and emits it, still pending. Returns the item's index.
    pub(crate) fn tool_call(&mut self, call_id: &str, name: &str, input: Value) -> usize {
        let idx = self.tool(call_id, name);
        if let Some(state) = self.items.get_mut(idx) {
            state.input_complete = true;
            if let TurnItemKind::ToolCall {
                tool, input: slot, ..
            } = &mut state.item.kind
            {
                *tool = name.to_owned();
                *slot = input;
            }
        }
        self.emit(idx);
        idx
    }

    /// The turn-unique call id of the tool item `idx` (see [`Self::tool`]): the id
    /// the conversation sent back to the model must use, so each call pairs with
    /// its own result, in this turn and when the transcript is replayed.
    pub(crate) fn tool_call_id(&self, idx: usize) -> Option<String> {
        match &self.items.get(idx)?.item.kind {
            TurnItemKind::ToolCall { call_id, .. } => Some(call_id.clone()),
            _ => None,
        }
    }

    /// The tool call starts executing.
    pub(crate) fn tool_running(&mut self, idx: usize) {
        if let Some(state) = self.items.get_mut(idx) {
            state.item.status = TurnItemStatus::Running;
        }
        self.emit(idx);
    }

    /// The tool call finished: completed with `output`, or failed with the error text.
    pub(crate) fn tool_finished(&mut self, idx: usize, result: &Result<String, ToolError>) {
        match result {
            Ok(out) => self.settle_tool(idx, TurnItemStatus::Completed, Some(out.clone()), None),
            Err(e) => self.settle_tool(idx, TurnItemStatus::Failed, None, Some(e.to_string())),
        }
    }

    fn settle_tool(
        &mut self,
        idx: usize,
        status: TurnItemStatus,
        out: Option<String>,
        err: Option<String>,
    ) {
        let Some(state) = self.items.get_mut(idx) else {
            return;
        };
        if !state.open {
            return;
        }
        state.open = false;
        state.item.status = status;
        if let TurnItemKind::ToolCall {
            input,
            output,
            error,
            ..
        } = &mut state.item.kind
        {
            if !state.input_complete && !state.raw_input.is_empty() {
                *input = Value::String(state.raw_input.clone());
            }
            *output = out;
            *error = err;
        }
        self.emit(idx);
    }

    /// The model step ended: parts still open are completed; tool calls whose
    /// input never completed are failed (they will not be executed).
    pub(crate) fn end_step(&mut self) {
        for idx in 0..self.items.len() {
            let state = &self.items[idx];
            if !state.open {
                continue;
            }
            match state.item.kind {
                TurnItemKind::ToolCall { .. } if !state.input_complete => self.settle_tool(
                    idx,
                    TurnItemStatus::Failed,
                    None,
                    Some(
                        "the model's response ended before this tool call's input was complete"
                            .into(),
                    ),
                ),
                TurnItemKind::AssistantMessage { .. } | TurnItemKind::Reasoning { .. } => {
                    self.close_part(idx, TurnItemStatus::Completed)
                }
                _ => {}
            }
        }
        self.parts.clear();
        // Provider call ids are per step: the next step may reuse one.
        self.tools.clear();
    }

    /// Adds one model step's usage to the turn's total.
    fn add_usage(&mut self, usage: &Usage) {
        let step = TokenUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            total_tokens: usage.total_tokens,
        };
        self.usage
            .get_or_insert_with(TokenUsage::default)
            .add(&step);
    }

    /// Ends the turn: settles open items, emits the provider turn's final state and
    /// then exactly one `TurnTerminal`. Later calls do nothing.
    pub(crate) fn finish(&mut self, result: Result<(), TurnStop>) {
        if self.finished {
            return;
        }
        self.finished = true;
        let (part_status, tool_error, turn_status, outcome) = match result {
            Ok(()) => (
                TurnItemStatus::Completed,
                "the turn ended before this tool call finished".to_owned(),
                ProviderTurnStatus::Completed,
                TurnOutcome::Completed,
            ),
            Err(TurnStop::Interrupted(reason)) => {
                // PROC-09: a cancelled turn's message ends in MessageAbortedError,
                // recorded (and published) before the turn's final state is sent.
                self.set_error(AgentError {
                    name: MESSAGE_ABORTED.to_owned(),
                    message: format!("the turn was aborted ({reason})"),
                });
                (
                    TurnItemStatus::Interrupted,
                    TOOL_ABORTED.to_owned(),
                    ProviderTurnStatus::Interrupted,
                    TurnOutcome::Interrupted { reason },
                )
            }
            Err(TurnStop::Failed(error)) => (
                TurnItemStatus::Failed,
                format!(
                    "the turn failed before this tool call finished: {}",
                    error.message
                ),
                ProviderTurnStatus::Failed,
                TurnOutcome::Failed { error },
            ),
        };
        // An approval still waiting is cancelled with its node and item.
        self.cancel_approval();
        // Items are settled (and so persisted) before the terminal event.
        for idx in 0..self.items.len() {
            if !self.items[idx].open {
                continue;
            }
            if matches!(self.items[idx].item.kind, TurnItemKind::ToolCall { .. }) {
                self.settle_tool(idx, TurnItemStatus::Failed, None, Some(tool_error.clone()));
            } else {
                self.close_part(idx, part_status);
            }
        }
        let now = self.clock.now();
        self.turn.status = turn_status;
        self.turn.completed_at = Some(now);
        self.turn.usage = self.usage.clone();
        self.send(AdapterEvent::ProviderTurnUpdated(self.turn.clone()));
        self.set_status(AgentStatus::Idle);
        // Free the session's turn slot before the terminal event, so a caller that
        // reacts to the terminal can start the next turn at once.
        if let Some(on_finish) = self.on_finish.take() {
            on_finish();
        }
        self.send(AdapterEvent::TurnTerminal {
            thread_id: self.id.thread_id.clone(),
            run_id: self.id.run_id.clone(),
            provider_turn_id: self.id.provider_turn_id.clone(),
            outcome,
            usage: self.usage.clone(),
        });
    }
}

impl Drop for TurnRecorder {
    /// The turn task was aborted (or panicked) before finishing: settle everything
    /// as interrupted so no item stays pending. Sending is synchronous (unbounded).
    fn drop(&mut self) {
        if !self.finished {
            self.finish(Err(TurnStop::Interrupted("aborted".to_owned())));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use knife_runtime::SystemClock;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn recorder() -> (
        TurnRecorder,
        tokio::sync::mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>,
        Arc<AtomicBool>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let freed = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&freed);
        let run_id = RunId::from("run:t:1");
        let rec = TurnRecorder::new(
            tx,
            Arc::new(SystemClock),
            TurnIdentity {
                thread_id: ThreadId::from("t"),
                provider_turn_id: ProviderTurnId::for_run(&run_id, 1),
                run_id,
                run_ordinal: 1,
                provider_session_id: ProviderSessionId::from("s"),
                attempt: 1,
            },
            Duration::from_millis(50),
            4096,
            Box::new(move || flag.store(true, Ordering::SeqCst)),
        );
        (rec, rx, freed)
    }

    fn drain(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<Result<AdapterEvent, AdapterError>>,
    ) -> Vec<AdapterEvent> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            out.push(e.unwrap());
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_an_unfinished_recorder_settles_items_and_ends_the_turn() {
        let (mut rec, mut rx, freed) = recorder();
        rec.start();
        rec.part_delta(PartKind::Text, "t", "half a sent");
        rec.tool_input_start("c1", "read");
        drop(rec);
        let events = drain(&mut rx);
        assert!(freed.load(Ordering::SeqCst));
        let last_items: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                AdapterEvent::TurnItemUpdated(i) if i.completed_at.is_some() => Some(i.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(last_items.len(), 2);
        assert_eq!(last_items[0].status, TurnItemStatus::Interrupted);
        assert_eq!(last_items[1].status, TurnItemStatus::Failed);
        assert!(matches!(
            events.last(),
            Some(AdapterEvent::TurnTerminal {
                outcome: TurnOutcome::Interrupted { reason },
                ..
            }) if reason == "aborted"
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn finish_is_idempotent() {
        let (mut rec, mut rx, _) = recorder();
        rec.finish(Ok(()));
        rec.finish(Ok(()));
        drop(rec);
        let terminals = drain(&mut rx)
            .into_iter()
            .filter(|e| matches!(e, AdapterEvent::TurnTerminal { .. }))
            .count();
        assert_eq!(terminals, 1);
    }
}
