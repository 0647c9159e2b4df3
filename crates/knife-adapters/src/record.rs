//! Turning a runtime's notifications into knife's adapter events: the session's
//! [`EventSink`] and the [`TurnRecorder`] of one provider turn. Shared by the drivers.
//!
//! A turn emits, in order: the provider turn `running` and the agent status `busy`
//! ([`TurnRecorder::start`]); transcript items as they appear and change (each
//! snapshot carries the whole item; ids `item:<provider turn>:<n>`, ordinals
//! `run_ordinal * 1_000_000 + n`, n from 1 — the run's user message, written by
//! execution, is n = 0); approvals as a runtime request (`live` on this session) with an
//! `approval_request` node and an `item:<request id>` approval item; finally
//! ([`TurnRecorder::finish`]) every open item settled, pending approvals cancelled, the
//! provider turn's final state, status `idle` and one `TurnTerminal`. A recorder
//! dropped unfinished finishes itself as interrupted (`aborted`).
//!
//! Streaming text is throttled like the built-in agent's: a delta is emitted at once
//! when its item's last snapshot is at least [`FLUSH_INTERVAL`] old or [`FLUSH_BYTES`]
//! arrived since; otherwise the item is marked dirty and the driver calls
//! [`TurnRecorder::flush`] within [`FLUSH_INTERVAL`] ([`TurnRecorder::is_dirty`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use knife_protocol::*;
use knife_runtime::SharedClock;
use knife_runtime::recording;
use knife_runtime::sessions::requests::{ApprovalOrigin, pending_approval, request_item_id};
use serde_json::Value;
use tokio::time::Instant;

pub use crate::sink::{EventReceiver, EventSink};

/// Persistence window of streaming text: a text item is emitted at most this long after
/// its text changed ([`TurnRecorder::flush`] must run by then when deltas pause).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Unsent streaming text (bytes) that forces a snapshot at once.
pub const FLUSH_BYTES: usize = 4096;

/// Identity of the turn being recorded.
#[derive(Clone, Debug)]
pub struct TurnIds {
    pub thread_id: ThreadId,
    pub run_id: RunId,
    pub run_ordinal: u32,
    pub provider_turn_id: ProviderTurnId,
    pub provider_session_id: ProviderSessionId,
    /// 1-based attempt of the run.
    pub attempt: u32,
    /// The native conversation the turn runs in.
    pub provider_thread_id: Option<ProviderThreadId>,
}

/// Text items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextKind {
    Assistant,
    Reasoning,
}

/// What an approval is about, for [`TurnRecorder::approval_requested`].
#[derive(Clone, Debug)]
pub struct ApprovalAsk {
    pub kind: RuntimeRequestKind,
    /// The runtime's id of the call it guards (its tool item key).
    pub call_id: String,
    /// Tool name shown to the user (`command`, `file_change`, `mcp__knife__whoami`, …).
    pub tool: String,
    /// The command line, path or tool the user approves.
    pub subject: String,
    /// The call's arguments, as the runtime gave them.
    pub input: Value,
    /// Which rule of the runtime asked (e.g. `codex approval policy`).
    pub rule: String,
    /// The proposed change as a unified diff (codex file changes, CHG-05); `None` otherwise.
    pub diff: Option<String>,
}

/// Per-runtime differences of recording, for [`TurnRecorder::start_with`]; the
/// default is the codex driver's.
#[derive(Clone, Debug)]
pub struct RecorderStyle {
    /// Persistence window of streaming text ([`FLUSH_INTERVAL`]); zero emits every delta.
    pub flush_interval: Duration,
    /// Status of a guarded tool item once its approval is answered (`running` when the
    /// runtime runs it at once, `pending` when it reports the run itself).
    pub tool_after_approval: TurnItemStatus,
    /// Error of a tool item still open when the turn completes.
    pub unfinished_tool_error: &'static str,
}

impl Default for RecorderStyle {
    fn default() -> Self {
        Self {
            flush_interval: FLUSH_INTERVAL,
            tool_after_approval: TurnItemStatus::Running,
            unfinished_tool_error: "the turn ended before this tool call finished",
        }
    }
}

/// The changeable fields of a tool item, for [`TurnRecorder::tool_state`] /
/// [`TurnRecorder::set_tool_state`] (a runtime that reports calls field by field).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolState {
    pub tool: String,
    pub input: Value,
    pub output: Option<String>,
    pub error: Option<String>,
    /// `completed` / `failed` settle the item.
    pub status: TurnItemStatus,
}

struct PendingApproval {
    request: RuntimeRequest,
    node: Node,
    item_idx: usize,
}

/// Records one provider turn; see the module docs.
pub struct TurnRecorder {
    sink: EventSink,
    clock: SharedClock,
    ids: TurnIds,
    style: RecorderStyle,
    turn: ProviderTurn,
    items: Vec<(TurnItem, bool)>,
    by_key: HashMap<String, usize>,
    approvals: HashMap<RuntimeRequestId, PendingApproval>,
    finished: bool,
    /// Per text item: when it was last emitted and the bytes added since.
    text_meta: HashMap<usize, (Option<Instant>, usize)>,
    /// Text items with unsent text.
    dirty: HashSet<usize>,
}

impl std::fmt::Debug for TurnRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnRecorder")
            .field("ids", &self.ids)
            .field("items", &self.items.len())
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl TurnRecorder {
    /// Starts recording: emits the provider turn `running` and the status `busy`.
    pub fn start(sink: EventSink, clock: SharedClock, ids: TurnIds) -> Self {
        Self::start_with(sink, clock, ids, RecorderStyle::default())
    }

    /// [`TurnRecorder::start`] with a runtime's own [`RecorderStyle`].
    pub fn start_with(
        sink: EventSink,
        clock: SharedClock,
        ids: TurnIds,
        style: RecorderStyle,
    ) -> Self {
        let now = clock.now();
        let turn = ProviderTurn {
            id: ids.provider_turn_id.clone(),
            thread_id: ids.thread_id.clone(),
            run_id: ids.run_id.clone(),
            provider_thread_id: ids.provider_thread_id.clone(),
            provider_session_id: ids.provider_session_id.clone(),
            node_id: NodeId::root_of(&ids.run_id),
            ordinal: ids.attempt,
            status: ProviderTurnStatus::Running,
            started_at: now,
            completed_at: None,
            usage: None,
            error: None,
            native_turn_id: None,
        };
        let recorder = Self {
            sink,
            clock,
            ids,
            style,
            turn,
            items: Vec::new(),
            by_key: HashMap::new(),
            approvals: HashMap::new(),
            finished: false,
            text_meta: HashMap::new(),
            dirty: HashSet::new(),
        };
        recorder
            .sink
            .send(AdapterEvent::ProviderTurnUpdated(recorder.turn.clone()));
        recorder.status(AgentStatus::Busy);
        recorder
    }

    /// The turn's identity.
    pub fn ids(&self) -> &TurnIds {
        &self.ids
    }

    /// True once [`TurnRecorder::finish`] ran.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    fn status(&self, status: AgentStatus) {
        self.sink.send(AdapterEvent::AgentStatusChanged {
            thread_id: self.ids.thread_id.clone(),
            run_id: Some(self.ids.run_id.clone()),
            status,
        });
    }

    fn new_item(&mut self, key: Option<&str>, kind: TurnItemKind, status: TurnItemStatus) -> usize {
        let n = self.items.len() as u64 + 1;
        let now = self.clock.now();
        let item = TurnItem {
            id: TurnItemId::of_turn(&self.ids.provider_turn_id, n as u32),
            thread_id: self.ids.thread_id.clone(),
            run_id: Some(self.ids.run_id.clone()),
            provider_turn_id: Some(self.ids.provider_turn_id.clone()),
            ordinal: TurnItem::ordinal_in_run(self.ids.run_ordinal, n),
            status,
            started_at: Some(now),
            completed_at: None,
            updated_at: now,
            kind,
        };
        self.items.push((item, true));
        let idx = self.items.len() - 1;
        if let Some(key) = key {
            self.by_key.insert(key.to_owned(), idx);
        }
        idx
    }

    fn emit(&mut self, idx: usize) {
        self.dirty.remove(&idx);
        if let Some(meta) = self.text_meta.get_mut(&idx) {
            *meta = (Some(Instant::now()), 0);
        }
        let now = self.clock.now();
        let Some((item, open)) = self.items.get_mut(idx) else {
            return;
        };
        item.updated_at = now;
        if !*open && item.completed_at.is_none() {
            item.completed_at = Some(now);
        }
        let snapshot = item.clone();
        self.sink.send(AdapterEvent::TurnItemUpdated(snapshot));
    }

    fn text_item(&mut self, key: &str, kind: TextKind) -> usize {
        if let Some(&idx) = self.by_key.get(key) {
            return idx;
        }
        let item = match kind {
            TextKind::Assistant => TurnItemKind::AssistantMessage {
                text: String::new(),
                streaming: true,
            },
            TextKind::Reasoning => TurnItemKind::Reasoning {
                text: String::new(),
                streaming: true,
            },
        };
        self.new_item(Some(key), item, TurnItemStatus::Running)
    }

    /// Opens text item `key` (emitted, empty) unless it exists.
    pub fn text_started(&mut self, key: &str, kind: TextKind) {
        if self.finished || self.by_key.contains_key(key) {
            return;
        }
        let idx = self.text_item(key, kind);
        self.emit(idx);
    }

    /// Appends `delta` to text item `key` (created on first use) and emits it.
    pub fn text_delta(&mut self, key: &str, kind: TextKind, delta: &str) {
        if self.finished || delta.is_empty() {
            return;
        }
        let idx = self.text_item(key, kind);
        let Some((item, true)) = self.items.get_mut(idx) else {
            return;
        };
        let Some(field) = recording::text_field(&item.kind) else {
            return;
        };
        let offset = match &mut item.kind {
            TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } => {
                let offset = text.len();
                text.push_str(delta);
                offset
            }
            _ => return,
        };
        let live = Some(recording::delta(item, field, offset, delta));
        // Live at once (LIVE-01); the snapshot below follows the persistence window.
        if let Some(live) = live {
            self.sink.send(live);
        }
        let (last, unsent) = self.text_meta.entry(idx).or_insert((None, 0));
        *unsent += delta.len();
        if last.is_none_or(|at| at.elapsed() >= self.style.flush_interval) || *unsent >= FLUSH_BYTES
        {
            self.emit(idx);
        } else {
            self.dirty.insert(idx);
        }
    }

    /// True when a text item has text not emitted yet (call [`TurnRecorder::flush`]
    /// within [`FLUSH_INTERVAL`]).
    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Emits every text item with unsent text.
    pub fn flush(&mut self) {
        let mut dirty: Vec<usize> = self.dirty.iter().copied().collect();
        dirty.sort_unstable();
        for idx in dirty {
            self.emit(idx);
        }
    }

    /// Completes text item `key`, replacing its text with `full` when given (the
    /// runtime's final text wins over the concatenated deltas). Creates it if needed
    /// (a runtime that sends no deltas); an empty item that never was is skipped.
    pub fn text_done(&mut self, key: &str, kind: TextKind, full: Option<&str>) {
        if self.finished {
            return;
        }
        if !self.by_key.contains_key(key) && full.is_none_or(str::is_empty) {
            return;
        }
        let idx = self.text_item(key, kind);
        self.settle_text(idx, full, TurnItemStatus::Completed);
    }

    /// Ends text item `key` (when open) with `status`, streaming off; unknown keys are
    /// ignored.
    pub fn text_ended(&mut self, key: &str, status: TurnItemStatus) {
        if let Some(&idx) = self.by_key.get(key) {
            self.settle_text(idx, None, status);
        }
    }

    fn settle_text(&mut self, idx: usize, full: Option<&str>, status: TurnItemStatus) {
        let Some((item, open)) = self.items.get_mut(idx) else {
            return;
        };
        if !*open {
            return;
        }
        if let TurnItemKind::AssistantMessage { text, streaming }
        | TurnItemKind::Reasoning { text, streaming } = &mut item.kind
        {
            if let Some(full) = full {
                full.clone_into(text);
            }
            *streaming = false;
        }
        item.status = status;
        *open = false;
        self.emit(idx);
    }

    /// Opens tool item `key` (running) for call `call_id` of `tool` with `input`.
    pub fn tool_started(&mut self, key: &str, call_id: &str, tool: &str, input: Value) {
        if self.finished || self.by_key.contains_key(key) {
            return;
        }
        let idx = self.new_item(
            Some(key),
            TurnItemKind::ToolCall {
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                input,
                output: None,
                error: None,
            },
            TurnItemStatus::Running,
        );
        self.emit(idx);
    }

    /// Settles tool item `key`: `completed` with `output`, or `failed` with `error`.
    /// Unknown keys are ignored.
    pub fn tool_finished(&mut self, key: &str, output: Option<String>, error: Option<String>) {
        let Some(mut state) = self.tool_state(key) else {
            return;
        };
        state.status = if error.is_some() {
            TurnItemStatus::Failed
        } else {
            TurnItemStatus::Completed
        };
        state.output = output;
        state.error = error;
        self.set_tool_state(key, state);
    }

    /// Opens tool item `key` for call `call_id` in `state` (settled at once when
    /// `completed` / `failed`) unless it exists.
    pub fn tool_opened(&mut self, key: &str, call_id: &str, state: ToolState) {
        if self.finished || self.by_key.contains_key(key) {
            return;
        }
        let idx = self.new_item(
            Some(key),
            TurnItemKind::ToolCall {
                call_id: call_id.to_owned(),
                tool: String::new(),
                input: Value::Null,
                output: None,
                error: None,
            },
            TurnItemStatus::Pending,
        );
        self.put_tool_state(idx, state);
    }

    /// The fields of tool item `key` while it is open.
    pub fn tool_state(&self, key: &str) -> Option<ToolState> {
        let idx = *self.by_key.get(key)?;
        match self.items.get(idx)? {
            (
                TurnItem {
                    kind:
                        TurnItemKind::ToolCall {
                            tool,
                            input,
                            output,
                            error,
                            ..
                        },
                    status,
                    ..
                },
                true,
            ) => Some(ToolState {
                tool: tool.clone(),
                input: input.clone(),
                output: output.clone(),
                error: error.clone(),
                status: *status,
            }),
            _ => None,
        }
    }

    /// Replaces the fields of open tool item `key` and emits it (settled when `state`
    /// is `completed` / `failed`). Unknown or settled items are ignored.
    pub fn set_tool_state(&mut self, key: &str, state: ToolState) {
        if self.finished {
            return;
        }
        if let Some(&idx) = self.by_key.get(key)
            && let Some((_, true)) = self.items.get(idx)
        {
            self.put_tool_state(idx, state);
        }
    }

    fn put_tool_state(&mut self, idx: usize, state: ToolState) {
        let Some((item, open)) = self.items.get_mut(idx) else {
            return;
        };
        if let TurnItemKind::ToolCall {
            tool,
            input,
            output,
            error,
            ..
        } = &mut item.kind
        {
            *tool = state.tool;
            *input = state.input;
            *output = state.output;
            *error = state.error;
        }
        item.status = state.status;
        *open = !matches!(
            state.status,
            TurnItemStatus::Completed | TurnItemStatus::Failed
        );
        self.emit(idx);
    }

    /// The snapshot of item `key` (text or tool), settled or not.
    pub fn item(&self, key: &str) -> Option<&TurnItem> {
        self.items.get(*self.by_key.get(key)?).map(|(item, _)| item)
    }

    /// How many items the turn has (the latest one is number `item_count()`).
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// Whether tool item `key` exists.
    pub fn has_item(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// The input of tool item `key`, when it exists.
    pub fn tool_input(&self, key: &str) -> Option<&Value> {
        let idx = *self.by_key.get(key)?;
        match &self.items.get(idx)?.0.kind {
            TurnItemKind::ToolCall { input, .. } => Some(input),
            _ => None,
        }
    }

    /// The turn waits on the user: emits the approval node (`waiting`), the approval
    /// item (`item:<id>`, `waiting`), the guarded tool item as `waiting` (when it
    /// exists) and the runtime request (`pending`, live on this session).
    pub fn approval_requested(&mut self, id: &RuntimeRequestId, ask: ApprovalAsk) {
        if self.finished {
            return;
        }
        let origin = ApprovalOrigin {
            thread_id: &self.ids.thread_id,
            run_id: &self.ids.run_id,
            provider_turn_id: &self.ids.provider_turn_id,
            provider_session_id: &self.ids.provider_session_id,
        };
        let (node, request) = pending_approval(
            origin,
            id,
            ask.kind,
            ToolApproval {
                call_id: ask.call_id.clone(),
                tool: ask.tool.clone(),
                subject: ask.subject.clone(),
                input: ask.input.clone(),
                rule: ask.rule.clone(),
                message: None,
                diff: ask.diff.clone(),
            },
            self.clock.now(),
        );
        let item_idx = self.new_item(
            None,
            TurnItemKind::Approval {
                request_id: id.clone(),
                call_id: ask.call_id.clone(),
                tool: ask.tool,
                subject: ask.subject,
                decision: None,
                message: None,
            },
            TurnItemStatus::Waiting,
        );
        if let Some((item, _)) = self.items.get_mut(item_idx) {
            item.id = request_item_id(id);
        }
        self.sink.send(AdapterEvent::NodeUpdated(node.clone()));
        self.emit(item_idx);
        if let Some(&tool_idx) = self.by_key.get(&ask.call_id)
            && let Some((tool, true)) = self.items.get_mut(tool_idx)
        {
            tool.status = TurnItemStatus::Waiting;
            self.emit(tool_idx);
        }
        self.sink
            .send(AdapterEvent::RuntimeRequestUpdated(request.clone()));
        self.approvals.insert(
            id.clone(),
            PendingApproval {
                request,
                node,
                item_idx,
            },
        );
    }

    /// Whether approval `id` is pending on this turn.
    pub fn has_approval(&self, id: &RuntimeRequestId) -> bool {
        self.approvals.contains_key(id)
    }

    /// The user answered approval `id`: request `resolved` with the decision and
    /// message, node and item `completed`, the guarded tool item `running` again.
    pub fn approval_answered(&mut self, id: &RuntimeRequestId, answer: &RequestAnswer) {
        self.settle_approval(
            id,
            RuntimeRequestStatus::Resolved,
            NodeStatus::Completed,
            TurnItemStatus::Completed,
            Some(answer),
        );
    }

    /// Approval `id` ended unanswered (the turn stopped or the runtime withdrew it):
    /// request, node and item `cancelled`.
    pub fn approval_cancelled(&mut self, id: &RuntimeRequestId) {
        self.settle_approval(
            id,
            RuntimeRequestStatus::Cancelled,
            NodeStatus::Cancelled,
            TurnItemStatus::Cancelled,
            None,
        );
    }

    fn settle_approval(
        &mut self,
        id: &RuntimeRequestId,
        status: RuntimeRequestStatus,
        node_status: NodeStatus,
        item_status: TurnItemStatus,
        answer: Option<&RequestAnswer>,
    ) {
        let Some(PendingApproval {
            mut request,
            mut node,
            item_idx,
        }) = self.approvals.remove(id)
        else {
            return;
        };
        let now = self.clock.now();
        if let Some((item, open)) = self.items.get_mut(item_idx) {
            *open = false;
            item.status = item_status;
            if let (
                TurnItemKind::Approval {
                    decision, message, ..
                },
                Some(answer),
            ) = (&mut item.kind, answer)
            {
                *decision = Some(answer.decision);
                message.clone_from(&answer.message);
            }
        }
        self.emit(item_idx);
        node.status = node_status;
        node.completed_at = Some(now);
        self.sink.send(AdapterEvent::NodeUpdated(node));
        let call_id = request
            .tool_approval
            .as_ref()
            .map(|t| t.call_id.clone())
            .unwrap_or_default();
        request.status = status;
        request.resolved_at = Some(now);
        if let Some(answer) = answer {
            request.decision = Some(answer.decision);
            if let Some(detail) = request.tool_approval.as_mut() {
                detail.message.clone_from(&answer.message);
            }
        }
        self.sink.send(AdapterEvent::RuntimeRequestUpdated(request));
        if answer.is_some()
            && let Some(&tool_idx) = self.by_key.get(&call_id)
            && let Some((tool, true)) = self.items.get_mut(tool_idx)
            && tool.status == TurnItemStatus::Waiting
        {
            tool.status = self.style.tool_after_approval;
            self.emit(tool_idx);
        }
    }

    /// Records the runtime's own id of the turn (codex's turn id) on the provider turn
    /// and publishes it at once, so a fork after this run can name it (CHG-09).
    pub fn set_native_turn_id(&mut self, id: &str) {
        if self.finished || self.turn.native_turn_id.as_deref() == Some(id) {
            return;
        }
        self.turn.native_turn_id = Some(id.to_owned());
        self.sink
            .send(AdapterEvent::ProviderTurnUpdated(self.turn.clone()));
    }

    /// Sets the turn's token usage (emitted with the final state).
    pub fn set_usage(&mut self, usage: TokenUsage) {
        self.turn.usage = Some(usage);
    }

    /// Records `error` on the provider turn and publishes it (first one wins).
    pub fn set_error(&mut self, error: AgentError) {
        if self.turn.error.is_some() || self.finished {
            return;
        }
        self.turn.error = Some(error.clone());
        self.sink.send(AdapterEvent::AgentErrorRaised {
            thread_id: self.ids.thread_id.clone(),
            run_id: Some(self.ids.run_id.clone()),
            error,
        });
    }

    /// Publishes a retry status (the runtime retries a model call).
    pub fn retrying(&mut self, attempt: u32, message: String) {
        if self.finished {
            return;
        }
        let next = self.clock.now();
        self.status(AgentStatus::Retry {
            attempt,
            message,
            next,
        });
    }

    /// Ends the turn with `outcome` because the session itself is lost (the process
    /// exited): like [`TurnRecorder::finish`], except that pending approvals stay
    /// `pending` and `live` — the manager's release of the failed session settles them
    /// `expired` / `not_resumable` (MGR-41), which tells whoever answers later why.
    pub fn finish_session_lost(&mut self, outcome: TurnOutcome) {
        self.forget_approvals();
        self.finish(outcome);
    }

    /// Forgets the pending approvals without settling them (see
    /// [`TurnRecorder::finish_session_lost`]), for a driver that finishes later.
    pub fn forget_approvals(&mut self) {
        self.approvals.clear();
    }

    /// Cancels every pending approval ([`TurnRecorder::approval_cancelled`]).
    pub fn cancel_approvals(&mut self) {
        let mut pending: Vec<_> = self.approvals.keys().cloned().collect();
        pending.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        for id in pending {
            self.approval_cancelled(&id);
        }
    }

    /// Ends the turn with `outcome`: settles open items (text `completed`, or
    /// `interrupted` / `failed` with the turn; tools `failed`), cancels pending
    /// approvals, emits the provider turn's final state, status `idle`, then one
    /// `TurnTerminal`. Later calls do nothing.
    pub fn finish(&mut self, outcome: TurnOutcome) {
        if self.finished {
            return;
        }
        self.cancel_approvals();
        self.finished = true;
        let (item_status, turn_status, tool_error) = match &outcome {
            TurnOutcome::Completed => (
                TurnItemStatus::Completed,
                ProviderTurnStatus::Completed,
                self.style.unfinished_tool_error.to_owned(),
            ),
            TurnOutcome::Interrupted { .. } => (
                TurnItemStatus::Interrupted,
                ProviderTurnStatus::Interrupted,
                "Tool execution aborted".to_owned(),
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
        for idx in 0..self.items.len() {
            let Some((item, open)) = self.items.get_mut(idx) else {
                continue;
            };
            if !*open {
                continue;
            }
            *open = false;
            match &mut item.kind {
                TurnItemKind::ToolCall { error, .. } => {
                    *error = Some(tool_error.clone());
                    item.status = TurnItemStatus::Failed;
                }
                TurnItemKind::AssistantMessage { streaming, .. }
                | TurnItemKind::Reasoning { streaming, .. } => {
                    *streaming = false;
                    item.status = item_status;
                }
                _ => item.status = item_status,
            }
            self.emit(idx);
        }
        let now = self.clock.now();
        self.turn.status = turn_status;
        self.turn.completed_at = Some(now);
        self.sink
            .send(AdapterEvent::ProviderTurnUpdated(self.turn.clone()));
        self.status(AgentStatus::Idle);
        self.sink.send(AdapterEvent::TurnTerminal {
            thread_id: self.ids.thread_id.clone(),
            run_id: self.ids.run_id.clone(),
            provider_turn_id: self.ids.provider_turn_id.clone(),
            outcome,
            usage: self.turn.usage.clone(),
        });
    }
}

impl Drop for TurnRecorder {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(TurnOutcome::Interrupted {
                reason: "aborted".to_owned(),
            });
        }
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
