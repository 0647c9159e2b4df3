//! Pure mapping of one ACP prompt turn to knife's adapter events: `session/update`
//! notifications become turn items, `session/request_permission` becomes a runtime
//! request (with its node and approval item), the `session/prompt` result ends the
//! turn. [`AcpTurn`] keeps the turn's items and returns the events to emit from each
//! call; it does no I/O, so every rule here is unit-tested.
//!
//! Item rules (one knife provider turn = one `session/prompt`):
//! - `agent_message_chunk` / `agent_thought_chunk` text appends to the open
//!   assistant / reasoning item when it is the turn's latest item (and the chunk's
//!   `messageId`, when given, matches); otherwise a new item starts. Every chunk
//!   emits a snapshot (the manager's pump coalesces snapshots of one item per batch).
//! - `tool_call` creates a tool item (`call_id` = the agent's `toolCallId`, `tool` =
//!   its `name` or else its `kind`, `input` = `rawInput` or else the title) and
//!   completes the open text items before it; `tool_call_update` changes the fields
//!   present. `completed` / `failed` settle it with the text of its content (or
//!   `rawOutput`) as output / error.
//! - `user_message_chunk` and every other update (plans, modes, usage, …) is not a
//!   turn item: knife already recorded the user's message.
//! - Ending the turn settles whatever is still open: text items take the turn's
//!   outcome, unfinished tool calls fail, a pending approval is cancelled.

use std::collections::HashMap;

use knife_protocol::*;
use knife_runtime::SharedClock;
use knife_runtime::sessions::requests::{ApprovalOrigin, pending_approval, request_item_id};
use serde_json::Value;

use super::types::*;

/// Name of the error recorded on an interrupted turn (as the built-in agent does).
pub const MESSAGE_ABORTED: &str = "MessageAbortedError";

/// Which turn the events belong to.
#[derive(Clone, Debug)]
pub struct TurnIdentity {
    pub thread_id: ThreadId,
    pub run_id: RunId,
    pub run_ordinal: u32,
    pub provider_turn_id: ProviderTurnId,
    pub provider_session_id: ProviderSessionId,
    /// The provider thread of the ACP session (`provider-thread:acp:<sessionId>`).
    pub provider_thread_id: Option<ProviderThreadId>,
    /// 1-based attempt of the run.
    pub attempt: u32,
}

/// How a turn ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEnd {
    Completed,
    /// Cancelled; the reason as stored (`user`, `superseded`, `shutdown`).
    Interrupted(String),
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

struct ItemState {
    item: TurnItem,
    open: bool,
    /// The agent's `messageId` of a text item, when it gave one.
    message_id: Option<String>,
}

/// An approval the turn waits on.
struct PendingApproval {
    request: RuntimeRequest,
    node: Node,
    item_idx: usize,
    tool_idx: usize,
}

/// One ACP prompt turn being mapped; see the module docs.
pub struct AcpTurn {
    clock: SharedClock,
    id: TurnIdentity,
    turn: ProviderTurn,
    items: Vec<ItemState>,
    /// Tool items by the agent's `toolCallId`.
    tools: HashMap<String, usize>,
    approvals: HashMap<RuntimeRequestId, PendingApproval>,
    finished: bool,
}

impl AcpTurn {
    /// A turn that has not emitted anything yet; call [`AcpTurn::start`] first.
    pub fn new(clock: SharedClock, id: TurnIdentity) -> Self {
        let now = clock.now();
        let turn = ProviderTurn {
            id: id.provider_turn_id.clone(),
            thread_id: id.thread_id.clone(),
            run_id: id.run_id.clone(),
            provider_thread_id: id.provider_thread_id.clone(),
            provider_session_id: id.provider_session_id.clone(),
            node_id: NodeId::root_of(&id.run_id),
            ordinal: id.attempt,
            status: ProviderTurnStatus::Running,
            started_at: now,
            completed_at: None,
            usage: None,
            error: None,
        };
        Self {
            clock,
            id,
            turn,
            items: Vec::new(),
            tools: HashMap::new(),
            approvals: HashMap::new(),
            finished: false,
        }
    }

    /// The turn's identity.
    pub fn identity(&self) -> &TurnIdentity {
        &self.id
    }

    /// True once [`AcpTurn::finish`] ran.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Records the turn's token usage (from the `session/prompt` result), sent with
    /// the turn's final state and its terminal.
    pub fn set_usage(&mut self, usage: TokenUsage) {
        self.turn.usage = Some(usage);
    }

    /// The provider turn as running and the agent status `busy`.
    pub fn start(&mut self) -> Vec<AdapterEvent> {
        vec![
            AdapterEvent::ProviderTurnUpdated(self.turn.clone()),
            self.status(AgentStatus::Busy),
        ]
    }

    fn status(&self, status: AgentStatus) -> AdapterEvent {
        AdapterEvent::AgentStatusChanged {
            thread_id: self.id.thread_id.clone(),
            run_id: Some(self.id.run_id.clone()),
            status,
        }
    }

    fn new_item(&mut self, kind: TurnItemKind, status: TurnItemStatus) -> usize {
        let n = self.items.len() as u64 + 1;
        let now = self.clock.now();
        self.items.push(ItemState {
            item: TurnItem {
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
            },
            open: true,
            message_id: None,
        });
        self.items.len() - 1
    }

    /// Snapshot of item `idx` (stamping `updated_at`, and `completed_at` once closed).
    fn emit(&mut self, idx: usize) -> Option<AdapterEvent> {
        let now = self.clock.now();
        let state = self.items.get_mut(idx)?;
        state.item.updated_at = now;
        if !state.open && state.item.completed_at.is_none() {
            state.item.completed_at = Some(now);
        }
        Some(AdapterEvent::TurnItemUpdated(state.item.clone()))
    }

    /// Maps one `session/update` of this turn's session.
    pub fn apply(&mut self, update: SessionUpdate) -> Vec<AdapterEvent> {
        if self.finished {
            return Vec::new();
        }
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => self.text_chunk(false, chunk),
            SessionUpdate::AgentThoughtChunk(chunk) => self.text_chunk(true, chunk),
            SessionUpdate::ToolCall(mut call) => {
                if call.name.is_none() {
                    call.name = agent_tool_name(call.meta.as_ref());
                }
                self.tool_call(call)
            }
            SessionUpdate::ToolCallUpdate(mut update) => {
                if update.name.is_none() {
                    update.name = agent_tool_name(update.meta.as_ref());
                }
                self.tool_update(update)
            }
            SessionUpdate::UserMessageChunk(_) | SessionUpdate::Other => Vec::new(),
        }
    }

    fn text_chunk(&mut self, reasoning: bool, chunk: ContentChunk) -> Vec<AdapterEvent> {
        let Some(delta) = chunk.content.as_text() else {
            return Vec::new();
        };
        let mut events = Vec::new();
        let continues = self.items.last().is_some_and(|last| {
            last.open
                && (chunk.message_id.is_none() || last.message_id == chunk.message_id)
                && match last.item.kind {
                    TurnItemKind::AssistantMessage { .. } => !reasoning,
                    TurnItemKind::Reasoning { .. } => reasoning,
                    _ => false,
                }
        });
        if delta.is_empty() && !continues {
            // claude-agent-acp opens each message with an empty chunk: no empty item.
            return events;
        }
        let idx = if continues {
            self.items.len() - 1
        } else {
            events.extend(self.close_texts(TurnItemStatus::Completed));
            let kind = if reasoning {
                TurnItemKind::Reasoning {
                    text: String::new(),
                    streaming: true,
                }
            } else {
                TurnItemKind::AssistantMessage {
                    text: String::new(),
                    streaming: true,
                }
            };
            let idx = self.new_item(kind, TurnItemStatus::Running);
            self.items[idx].message_id = chunk.message_id.clone();
            idx
        };
        if let TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } =
            &mut self.items[idx].item.kind
        {
            text.push_str(delta);
        }
        events.extend(self.emit(idx));
        events
    }

    /// Closes every open text item with `status` (streaming off).
    fn close_texts(&mut self, status: TurnItemStatus) -> Vec<AdapterEvent> {
        let mut events = Vec::new();
        for idx in 0..self.items.len() {
            let state = &mut self.items[idx];
            if !state.open {
                continue;
            }
            match &mut state.item.kind {
                TurnItemKind::AssistantMessage { streaming, .. }
                | TurnItemKind::Reasoning { streaming, .. } => {
                    *streaming = false;
                    state.open = false;
                    state.item.status = status;
                }
                _ => continue,
            }
            events.extend(self.emit(idx));
        }
        events
    }

    fn tool_call(&mut self, call: ToolCall) -> Vec<AdapterEvent> {
        if self.tools.contains_key(&call.tool_call_id) {
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
        let mut events = self.close_texts(TurnItemStatus::Completed);
        let tool = call
            .name
            .clone()
            .unwrap_or_else(|| call.kind.as_str().to_owned());
        let input = call
            .raw_input
            .clone()
            .unwrap_or_else(|| Value::String(call.title.clone()));
        let idx = self.new_item(
            TurnItemKind::ToolCall {
                call_id: call.tool_call_id.clone(),
                tool,
                input,
                output: None,
                error: None,
            },
            TurnItemStatus::Pending,
        );
        self.tools.insert(call.tool_call_id.clone(), idx);
        events.extend(self.tool_update(ToolCallUpdate {
            tool_call_id: call.tool_call_id,
            status: Some(call.status),
            content: (!call.content.is_empty()).then_some(call.content),
            raw_output: call.raw_output,
            ..ToolCallUpdate::default()
        }));
        events
    }

    fn tool_update(&mut self, update: ToolCallUpdate) -> Vec<AdapterEvent> {
        let Some(&idx) = self.tools.get(&update.tool_call_id) else {
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
            let mut events = self.tool_call(call);
            if update.status.is_some() || update.content.is_some() || update.raw_output.is_some() {
                events.extend(self.tool_update(update));
            }
            return events;
        };
        let state = &mut self.items[idx];
        if !state.open {
            return Vec::new();
        }
        let TurnItemKind::ToolCall {
            tool,
            input,
            output,
            error,
            ..
        } = &mut state.item.kind
        else {
            return Vec::new();
        };
        if let Some(name) = update.name {
            *tool = name;
        } else if let Some(kind) = update.kind.filter(|_| tool.is_empty()) {
            *tool = kind.as_str().to_owned();
        }
        if let Some(raw) = update.raw_input {
            *input = raw;
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
                state.open = false;
                state.item.status = TurnItemStatus::Completed;
                *output = text.or_else(|| output.take()).or(Some(String::new()));
            }
            Some(ToolCallStatus::Failed) => {
                state.open = false;
                state.item.status = TurnItemStatus::Failed;
                *error = text
                    .or_else(|| output.take())
                    .or_else(|| Some("the agent reported the tool call as failed".to_owned()));
            }
            Some(ToolCallStatus::InProgress) => {
                state.item.status = TurnItemStatus::Running;
                if text.is_some() {
                    *output = text;
                }
            }
            Some(ToolCallStatus::Pending) | None => {
                if text.is_some() {
                    *output = text;
                }
            }
        }
        self.emit(idx).into_iter().collect()
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
        if self.finished {
            return Vec::new();
        }
        let mut events = Vec::new();
        let call_id = ask.tool_call.tool_call_id.clone();
        if !self.tools.contains_key(&call_id) {
            events.extend(self.tool_update(ToolCallUpdate {
                status: None,
                content: None,
                raw_output: None,
                ..ask.tool_call.clone()
            }));
        }
        let Some(&tool_idx) = self.tools.get(&call_id) else {
            return events;
        };
        let (tool, input) = match &self.items[tool_idx].item.kind {
            TurnItemKind::ToolCall { tool, input, .. } => (tool.clone(), input.clone()),
            _ => (String::new(), Value::Null),
        };
        let kind = ask.tool_call.kind.unwrap_or_default();
        let subject = ask
            .tool_call
            .title
            .clone()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| tool.clone());
        let origin = ApprovalOrigin {
            thread_id: &self.id.thread_id,
            run_id: &self.id.run_id,
            provider_turn_id: &self.id.provider_turn_id,
            provider_session_id: &self.id.provider_session_id,
        };
        let (node, request) = pending_approval(
            origin,
            request_id,
            request_kind(kind),
            ToolApproval {
                call_id: call_id.clone(),
                tool: tool.clone(),
                subject: subject.clone(),
                input,
                rule: approval_rule(ask),
                message: None,
            },
            self.clock.now(),
        );
        let item_idx = self.new_item(
            TurnItemKind::Approval {
                request_id: request_id.clone(),
                call_id,
                tool,
                subject,
                decision: None,
                message: None,
            },
            TurnItemStatus::Waiting,
        );
        self.items[item_idx].item.id = request_item_id(request_id);
        events.push(AdapterEvent::NodeUpdated(node.clone()));
        events.extend(self.emit(item_idx));
        self.items[tool_idx].item.status = TurnItemStatus::Waiting;
        events.extend(self.emit(tool_idx));
        events.push(AdapterEvent::RuntimeRequestUpdated(request.clone()));
        self.approvals.insert(
            request_id.clone(),
            PendingApproval {
                request,
                node,
                item_idx,
                tool_idx,
            },
        );
        events
    }

    /// Whether the turn waits on approval `request_id`.
    pub fn is_waiting_on(&self, request_id: &RuntimeRequestId) -> bool {
        self.approvals.contains_key(request_id)
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
        let Some(PendingApproval {
            mut request,
            mut node,
            item_idx,
            tool_idx,
        }) = self.approvals.remove(request_id)
        else {
            return Vec::new();
        };
        let now = self.clock.now();
        let mut events = Vec::new();
        if let Some(state) = self.items.get_mut(item_idx) {
            state.open = false;
            state.item.status = match answer {
                Some(_) => TurnItemStatus::Completed,
                None => TurnItemStatus::Cancelled,
            };
            if let (
                TurnItemKind::Approval {
                    decision, message, ..
                },
                Some(answer),
            ) = (&mut state.item.kind, answer)
            {
                *decision = Some(answer.decision);
                message.clone_from(&answer.message);
            }
        }
        events.extend(self.emit(item_idx));
        if answer.is_some()
            && let Some(state) = self.items.get_mut(tool_idx)
            && state.open
            && state.item.status == TurnItemStatus::Waiting
        {
            state.item.status = TurnItemStatus::Pending;
            events.extend(self.emit(tool_idx));
        }
        node.status = match answer {
            Some(_) => NodeStatus::Completed,
            None => NodeStatus::Cancelled,
        };
        node.completed_at = Some(now);
        events.push(AdapterEvent::NodeUpdated(node));
        request.resolved_at = Some(now);
        match answer {
            Some(answer) => {
                request.status = RuntimeRequestStatus::Resolved;
                request.decision = Some(answer.decision);
                if let Some(detail) = request.tool_approval.as_mut() {
                    detail.message.clone_from(&answer.message);
                }
            }
            None => request.status = RuntimeRequestStatus::Cancelled,
        }
        events.push(AdapterEvent::RuntimeRequestUpdated(request));
        events
    }

    /// Forgets the pending approvals without settling them, before [`AcpTurn::finish`]
    /// of a turn whose agent process died: they stay `pending` / `live` and the
    /// manager's release of the failed session settles them `expired` (MGR-41).
    pub fn leave_approvals_to_release(&mut self) {
        self.approvals.clear();
    }

    /// Ends the turn: cancels pending approvals, settles open items, emits the
    /// provider turn's final state, the agent status `idle`, then exactly one
    /// `TurnTerminal`. Later calls return nothing.
    pub fn finish(&mut self, end: TurnEnd) -> Vec<AdapterEvent> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        let mut events = Vec::new();
        let pending: Vec<RuntimeRequestId> = self.approvals.keys().cloned().collect();
        for id in pending {
            events.extend(self.permission_settled(&id, None));
        }
        let (text_status, tool_error, turn_status, outcome) = match end {
            TurnEnd::Completed => (
                TurnItemStatus::Completed,
                "the turn ended before the agent reported this tool call finished".to_owned(),
                ProviderTurnStatus::Completed,
                TurnOutcome::Completed,
            ),
            TurnEnd::Interrupted(reason) => {
                let error = AgentError {
                    name: MESSAGE_ABORTED.to_owned(),
                    message: format!("the turn was aborted ({reason})"),
                };
                self.turn.error = Some(error.clone());
                events.push(AdapterEvent::AgentErrorRaised {
                    thread_id: self.id.thread_id.clone(),
                    run_id: Some(self.id.run_id.clone()),
                    error,
                });
                (
                    TurnItemStatus::Interrupted,
                    "Tool execution aborted".to_owned(),
                    ProviderTurnStatus::Interrupted,
                    TurnOutcome::Interrupted { reason },
                )
            }
            TurnEnd::Failed(error) => (
                TurnItemStatus::Failed,
                format!(
                    "the turn failed before this tool call finished: {}",
                    error.message
                ),
                ProviderTurnStatus::Failed,
                TurnOutcome::Failed { error },
            ),
        };
        events.extend(self.close_texts(text_status));
        for idx in 0..self.items.len() {
            let state = &mut self.items[idx];
            if !state.open {
                continue;
            }
            state.open = false;
            if let TurnItemKind::ToolCall { error, .. } = &mut state.item.kind {
                state.item.status = TurnItemStatus::Failed;
                *error = Some(tool_error.clone());
            } else {
                state.item.status = text_status;
            }
            events.extend(self.emit(idx));
        }
        let now = self.clock.now();
        self.turn.status = turn_status;
        self.turn.completed_at = Some(now);
        events.push(AdapterEvent::ProviderTurnUpdated(self.turn.clone()));
        events.push(self.status(AgentStatus::Idle));
        events.push(AdapterEvent::TurnTerminal {
            thread_id: self.id.thread_id.clone(),
            run_id: self.id.run_id.clone(),
            provider_turn_id: self.id.provider_turn_id.clone(),
            outcome,
            usage: self.turn.usage.clone(),
        });
        events
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
