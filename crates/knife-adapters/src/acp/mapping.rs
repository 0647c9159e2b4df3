//! Pure mapping of one ACP prompt turn to knife's adapter events: `session/update`
//! notifications become turn items, `session/request_permission` becomes a runtime
//! request (with its node and approval item), the `session/prompt` result ends the
//! turn. [`AcpTurn`] maps them onto the shared [`TurnRecorder`] (item ids, ordinals,
//! approvals and the turn's end are recorded as for every driver) with the ACP
//! [`RecorderStyle`], and returns the events recorded by each call; it does no I/O, so
//! every rule here is unit-tested.
//!
//! Item rules (one knife provider turn = one `session/prompt`):
//! - `agent_message_chunk` / `agent_thought_chunk` text appends to the open
//!   assistant / reasoning item when it is the turn's latest item (and the chunk's
//!   `messageId`, when given, matches); otherwise a new item starts. Every chunk
//!   with text goes out at once as a live delta; its durable state follows the
//!   recorder's persistence window (50 ms growing to 250 ms, or 4 KiB: the session's
//!   actor calls [`AcpTurn::flush_due`] by [`AcpTurn::next_flush_deadline`]; LIVE-03);
//!   an empty chunk adds nothing.
//! - `tool_call` creates a tool item (`call_id` = the agent's `toolCallId`, `tool` =
//!   its `name` or else its `kind`, `input` = `rawInput` or else the title) and
//!   completes the open text items before it; `tool_call_update` changes the fields
//!   present. `completed` / `failed` settle it with the text of its content (or
//!   `rawOutput`) as output / error.
//! - `user_message_chunk` and every other update (plans, modes, usage, …) is not a
//!   turn item: knife already recorded the user's message.
//! - Ending the turn settles whatever is still open: text items take the turn's
//!   outcome, unfinished tool calls fail, a pending approval is cancelled.

use knife_protocol::*;
use knife_runtime::SharedClock;
use serde_json::Value;

use super::types::*;
use knife_runtime::recording::{
    ApprovalAsk, EventReceiver, EventSink, RecorderStyle, TextKind, ToolState, TurnRecorder,
};

/// Name of the error recorded on an interrupted turn (as the built-in agent does).
pub const MESSAGE_ABORTED: &str = "MessageAbortedError";

/// Which turn the events belong to (the provider thread is the ACP session's,
/// `provider-thread:acp:<sessionId>`).
pub type TurnIdentity = knife_runtime::recording::TurnIds;

/// How a turn ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEnd {
    /// The prompt turn ended on its own (`end_turn`).
    Completed,
    /// Cancelled; the reason as stored (`user`, `superseded`, `shutdown`).
    Interrupted(String),
    /// The turn failed (`max_tokens`, `max_turn_requests`, `refusal`, an unknown stop
    /// reason, or the agent errored); the run's error.
    Failed(RunError),
}

impl TurnEnd {
    /// The turn end for a `session/prompt` result. `interrupt` is the reason of an
    /// interrupt knife asked for, if any: an agent that answers `end_turn` after a
    /// `session/cancel` still ends the turn interrupted.
    pub fn from_stop_reason(stop: StopReason, interrupt: Option<&str>) -> Self {
        if let Some(reason) = interrupt {
            return TurnEnd::Interrupted(reason.to_owned());
        }
        let failed = |code: &str, message: &str| {
            let mut e = RunError::new("provider.stop", message);
            e.code = Some(code.to_owned());
            TurnEnd::Failed(e)
        };
        match stop {
            StopReason::EndTurn => TurnEnd::Completed,
            // Cancelled without knife asking (the agent's own UI or a signal).
            StopReason::Cancelled => TurnEnd::Interrupted("agent".to_owned()),
            StopReason::MaxTokens => failed(
                "max_tokens",
                "the agent stopped: the model reached its output token limit; ask it to \
                 continue or raise the model's limit in the agent's own configuration",
            ),
            StopReason::MaxTurnRequests => failed(
                "max_turn_requests",
                "the agent stopped: it reached its limit of model requests for one turn; \
                 send a message to let it continue",
            ),
            StopReason::Refusal => failed(
                "refusal",
                "the agent refused to continue this turn; rephrase the request",
            ),
            StopReason::Other => failed(
                "unknown",
                "the agent stopped the turn for a reason knife does not know; check the \
                 agent's log",
            ),
        }
    }
}

/// The runtime-request kind of an approval for a tool of `kind`: `execute` (and
/// unknown kinds) → `command`; `edit`, `delete`, `move` → `file_change`; `read`,
/// `search` → `file_read`.
pub fn request_kind(kind: ToolKind) -> RuntimeRequestKind {
    match kind {
        ToolKind::Edit | ToolKind::Delete | ToolKind::Move => RuntimeRequestKind::FileChange,
        ToolKind::Read | ToolKind::Search => RuntimeRequestKind::FileRead,
        _ => RuntimeRequestKind::Command,
    }
}

/// The agent's option for the user's `decision`, by option kind:
/// `allow_once` → an `allow_once` option, else `allow_always`; `allow_always` → an
/// `allow_always` option, else `allow_once`; `deny` → `reject_once`, else
/// `reject_always`. With no option of a fitting kind the answer is `cancelled` for a
/// deny (the agent then does not run the call) and `None` for an allow (the caller
/// reports that the agent offered no way to allow).
pub fn choose_option(
    options: &[PermissionOption],
    decision: ApprovalDecision,
) -> Option<PermissionOutcome> {
    use PermissionOptionKind as K;
    let order: &[K] = match decision {
        ApprovalDecision::AllowOnce => &[K::AllowOnce, K::AllowAlways],
        ApprovalDecision::AllowAlways => &[K::AllowAlways, K::AllowOnce],
        ApprovalDecision::Deny => &[K::RejectOnce, K::RejectAlways],
    };
    order
        .iter()
        .find_map(|kind| options.iter().find(|o| o.kind == *kind))
        .map(|o| PermissionOutcome::Selected {
            option_id: o.option_id.clone(),
        })
        .or_else(|| (decision == ApprovalDecision::Deny).then_some(PermissionOutcome::Cancelled))
}

/// Text of a tool call's content blocks (diffs summarised as `edited <path>`), one
/// block per line; `None` when there is none.
pub fn content_text(content: &[ToolCallContent]) -> Option<String> {
    let parts: Vec<String> = content
        .iter()
        .filter_map(|c| match c {
            ToolCallContent::Content { content } => content.as_text().map(str::to_owned),
            ToolCallContent::Diff { path, .. } => Some(format!("edited {}", path.display())),
            ToolCallContent::Other => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// The open text item: its recorder key, whether it is reasoning, the agent's
/// `messageId` and its number (it continues only while it is the turn's latest item).
struct OpenText {
    key: String,
    kind: TextKind,
    message_id: Option<String>,
    n: usize,
}

/// One ACP prompt turn being mapped onto a [`TurnRecorder`]; see the module docs.
pub struct AcpTurn {
    recorder: TurnRecorder,
    events: EventReceiver,
    text: Option<OpenText>,
}

/// How the ACP driver's recording differs from the default: an answered approval's
/// tool waits for the agent's report (`pending`). (Until 2026-12-02 every chunk was
/// also written durably, `flush_interval` 0: a chunk event per delta, ~575 bytes on a
/// subscriber's wire, broke LIVE-03's 300 bytes per delta; the live delta now shows
/// each chunk at once and the default window persists it.)
fn acp_style() -> RecorderStyle {
    RecorderStyle {
        tool_after_approval: Some(TurnItemStatus::Pending),
        unfinished_tool_error: "the turn ended before the agent reported this tool call finished",
        ..RecorderStyle::default()
    }
}

impl AcpTurn {
    /// A turn whose first events (turn `running`, status `busy`) [`AcpTurn::start`]
    /// returns.
    pub fn new(clock: SharedClock, id: TurnIdentity) -> Self {
        let (sink, events) = EventSink::new();
        Self {
            recorder: TurnRecorder::start_with(sink, clock, id, acp_style()),
            events,
            text: None,
        }
    }

    /// The events recorded since the last call.
    fn drain(&mut self) -> Vec<AdapterEvent> {
        let mut out = Vec::new();
        while let Ok(Ok(event)) = self.events.try_recv() {
            out.push(event);
        }
        out
    }

    /// The turn's identity.
    pub fn identity(&self) -> &TurnIdentity {
        self.recorder.ids()
    }

    /// True once [`AcpTurn::finish`] ran.
    pub fn is_finished(&self) -> bool {
        self.recorder.is_finished()
    }

    /// Records the turn's token usage (from the `session/prompt` result), sent with
    /// the turn's final state and its terminal, and as the turn's one model-call
    /// record (TURN-06: the finest usage an ACP agent reports).
    pub fn set_usage(&mut self, usage: TokenUsage) {
        self.recorder.model_call(usage.clone(), None);
        self.recorder.set_usage(usage);
    }

    /// The provider turn as running and the agent status `busy`.
    pub fn start(&mut self) -> Vec<AdapterEvent> {
        self.drain()
    }

    /// When [`AcpTurn::flush_due`] must run next: the end of the persistence window
    /// of a text item with text not written durably yet (PROC-12), if any.
    pub fn next_flush_deadline(&self) -> Option<tokio::time::Instant> {
        self.recorder.next_flush_deadline()
    }

    /// Writes the durable state of every text item whose window ended; returns the
    /// events recorded (appended chunks).
    pub fn flush_due(&mut self) -> Vec<AdapterEvent> {
        self.recorder.flush_due();
        self.drain()
    }

    /// Maps one `session/update` of this turn's session.
    pub fn apply(&mut self, update: SessionUpdate) -> Vec<AdapterEvent> {
        if self.recorder.is_finished() {
            return Vec::new();
        }
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => self.text_chunk(TextKind::Assistant, chunk),
            SessionUpdate::AgentThoughtChunk(chunk) => self.text_chunk(TextKind::Reasoning, chunk),
            SessionUpdate::ToolCall(mut call) => {
                if call.name.is_none() {
                    call.name = agent_tool_name(call.meta.as_ref());
                }
                self.tool_call(call);
            }
            SessionUpdate::ToolCallUpdate(mut update) => {
                if update.name.is_none() {
                    update.name = agent_tool_name(update.meta.as_ref());
                }
                self.tool_update(update);
            }
            SessionUpdate::UserMessageChunk(_) | SessionUpdate::Other => {}
        }
        self.drain()
    }

    fn text_chunk(&mut self, kind: TextKind, chunk: ContentChunk) {
        let Some(delta) = chunk.content.as_text() else {
            return;
        };
        let count = self.recorder.item_count();
        let continues = self.text.as_ref().is_some_and(|open| {
            open.n == count
                && open.kind == kind
                && (chunk.message_id.is_none() || open.message_id == chunk.message_id)
        });
        if delta.is_empty() {
            // claude-agent-acp opens each message with an empty chunk: no empty item.
            return;
        }
        if !continues {
            self.close_text(TurnItemStatus::Completed);
            // Created by its first delta (emitted at once); the NUL keeps text keys
            // apart from the agent's `toolCallId`s, the tool items' keys.
            let key = format!("\u{0}text:{}", count + 1);
            self.text = Some(OpenText {
                key,
                kind,
                message_id: chunk.message_id.clone(),
                n: count + 1,
            });
        }
        if let Some(open) = &self.text {
            self.recorder.text_delta(&open.key, kind, delta);
        }
    }

    /// Ends the open text item with `status` (streaming off).
    fn close_text(&mut self, status: TurnItemStatus) {
        if let Some(open) = self.text.take() {
            self.recorder.text_ended(&open.key, status);
        }
    }

    fn tool_call(&mut self, call: ToolCall) {
        if self.recorder.has_item(&call.tool_call_id) {
            // A repeated announcement is an update of the same call.
            return self.tool_update(ToolCallUpdate {
                tool_call_id: call.tool_call_id,
                title: Some(call.title),
                name: call.name,
                kind: Some(call.kind),
                status: Some(call.status),
                content: Some(call.content),
                raw_input: call.raw_input,
                raw_output: call.raw_output,
                meta: call.meta,
            });
        }
        self.close_text(TurnItemStatus::Completed);
        let mut state = ToolState {
            tool: call
                .name
                .clone()
                .unwrap_or_else(|| call.kind.as_str().to_owned()),
            input: call
                .raw_input
                .clone()
                .unwrap_or_else(|| Value::String(call.title.clone())),
            output: None,
            error: None,
            status: TurnItemStatus::Pending,
        };
        apply_tool_update(
            &mut state,
            ToolCallUpdate {
                tool_call_id: call.tool_call_id.clone(),
                status: Some(call.status),
                content: (!call.content.is_empty()).then_some(call.content),
                raw_output: call.raw_output,
                ..ToolCallUpdate::default()
            },
        );
        self.recorder
            .tool_opened(&call.tool_call_id, &call.tool_call_id, state);
    }

    fn tool_update(&mut self, update: ToolCallUpdate) {
        if !self.recorder.has_item(&update.tool_call_id) {
            // An update of a call never announced: announce it now.
            let call = ToolCall {
                tool_call_id: update.tool_call_id.clone(),
                title: update.title.clone().unwrap_or_default(),
                name: update.name.clone(),
                kind: update.kind.unwrap_or_default(),
                status: ToolCallStatus::Pending,
                content: Vec::new(),
                raw_input: update.raw_input.clone(),
                raw_output: None,
                meta: None,
            };
            self.tool_call(call);
            if update.status.is_some() || update.content.is_some() || update.raw_output.is_some() {
                self.tool_update(update);
            }
            return;
        }
        let key = update.tool_call_id.clone();
        let Some(mut state) = self.recorder.tool_state(&key) else {
            return;
        };
        apply_tool_update(&mut state, update);
        self.recorder.set_tool_state(&key, state);
    }

    /// The agent asks to allow a tool call (`session/request_permission`): emits the
    /// approval node (`waiting`), the approval item `item:<request>` (`waiting`), the
    /// tool item as `waiting`, then the runtime request (`pending`, live on this
    /// session). The caller keeps the JSON-RPC request open until
    /// [`AcpTurn::permission_settled`].
    pub fn permission_requested(
        &mut self,
        request_id: &RuntimeRequestId,
        ask: &RequestPermissionRequest,
    ) -> Vec<AdapterEvent> {
        if self.recorder.is_finished() {
            return Vec::new();
        }
        let call_id = ask.tool_call.tool_call_id.clone();
        if !self.recorder.has_item(&call_id) {
            self.tool_update(ToolCallUpdate {
                status: None,
                content: None,
                raw_output: None,
                ..ask.tool_call.clone()
            });
        }
        let (tool, input) = match self.recorder.item(&call_id).map(|i| &i.kind) {
            Some(TurnItemKind::ToolCall { tool, input, .. }) => (tool.clone(), input.clone()),
            Some(_) => (String::new(), Value::Null),
            None => return self.drain(),
        };
        let subject = ask
            .tool_call
            .title
            .clone()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| tool.clone());
        self.recorder.approval_requested(
            request_id,
            ApprovalAsk {
                kind: request_kind(ask.tool_call.kind.unwrap_or_default()),
                call_id,
                tool,
                subject,
                input,
                rule: approval_rule(ask),
                diff: None,
            },
        );
        self.drain()
    }

    /// Whether the turn waits on approval `request_id`.
    pub fn is_waiting_on(&self, request_id: &RuntimeRequestId) -> bool {
        self.recorder.has_approval(request_id)
    }

    /// Settles approval `request_id`: with `Some(answer)` the request is `resolved`
    /// with the decision (node and item `completed`, the tool item back to `pending`
    /// until the agent reports it); with `None` it is `cancelled` (node and item
    /// `cancelled`).
    pub fn permission_settled(
        &mut self,
        request_id: &RuntimeRequestId,
        answer: Option<&RequestAnswer>,
    ) -> Vec<AdapterEvent> {
        match answer {
            Some(answer) => self.recorder.approval_answered(request_id, answer),
            None => self.recorder.approval_cancelled(request_id),
        }
        self.drain()
    }

    /// Forgets the pending approvals without settling them, before [`AcpTurn::finish`]
    /// of a turn whose agent process died: they stay `pending` / `live` and the
    /// manager's release of the failed session settles them `expired` (MGR-41).
    pub fn leave_approvals_to_release(&mut self) {
        self.recorder.forget_approvals();
    }

    /// Ends the turn: cancels pending approvals, settles open items, emits the
    /// provider turn's final state, the agent status `idle`, then exactly one
    /// `TurnTerminal`. Later calls return nothing.
    pub fn finish(&mut self, end: TurnEnd) -> Vec<AdapterEvent> {
        if self.recorder.is_finished() {
            return Vec::new();
        }
        self.recorder.cancel_approvals();
        let (text_status, outcome) = match end {
            TurnEnd::Completed => (TurnItemStatus::Completed, TurnOutcome::Completed),
            TurnEnd::Interrupted(reason) => {
                self.recorder.set_error(AgentError {
                    name: MESSAGE_ABORTED.to_owned(),
                    message: format!("the turn was aborted ({reason})"),
                });
                (
                    TurnItemStatus::Interrupted,
                    TurnOutcome::Interrupted { reason },
                )
            }
            TurnEnd::Failed(error) => (TurnItemStatus::Failed, TurnOutcome::Failed { error }),
        };
        self.close_text(text_status);
        self.recorder.finish(outcome);
        self.drain()
    }
}

/// Applies the fields present in `update` to a tool item: the name (or the kind when
/// it has none), the input, and the content's text (or `rawOutput`) as output while
/// running, as output on `completed`, as error on `failed`.
fn apply_tool_update(state: &mut ToolState, update: ToolCallUpdate) {
    if let Some(name) = update.name {
        state.tool = name;
    } else if let Some(kind) = update.kind.filter(|_| state.tool.is_empty()) {
        state.tool = kind.as_str().to_owned();
    }
    if let Some(raw) = update.raw_input {
        state.input = raw;
    }
    let text = update
        .content
        .as_deref()
        .and_then(content_text)
        .or_else(|| {
            update.raw_output.as_ref().map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        });
    match update.status {
        Some(ToolCallStatus::Completed) => {
            state.status = TurnItemStatus::Completed;
            state.output = text.or_else(|| state.output.take()).or(Some(String::new()));
        }
        Some(ToolCallStatus::Failed) => {
            state.status = TurnItemStatus::Failed;
            state.error = text
                .or_else(|| state.output.take())
                .or_else(|| Some("the agent reported the tool call as failed".to_owned()));
        }
        Some(ToolCallStatus::InProgress) => {
            state.status = TurnItemStatus::Running;
            if text.is_some() {
                state.output = text;
            }
        }
        Some(ToolCallStatus::Pending) | None => {
            if text.is_some() {
                state.output = text;
            }
        }
    }
}

#[cfg(test)]
#[path = "mapping_tests.rs"]
mod tests;

/// Why approval was asked, as read after "asked by ": `the agent (choices: Always Allow,
/// Allow, Reject)` (the option names the agent offered; ids stay internal), or `the
/// agent` when it offered none with a name.
pub fn approval_rule(ask: &RequestPermissionRequest) -> String {
    let names: Vec<&str> = ask
        .options
        .iter()
        .map(|o| o.name.trim())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        "the agent".to_owned()
    } else {
        format!("the agent (choices: {})", names.join(", "))
    }
}
