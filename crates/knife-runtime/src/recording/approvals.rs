//! Runtime-request items of the one recorder: a tool approval as a runtime request
//! (`live` on this session), its `approval_request` node and its transcript item,
//! from `pending` / `waiting` to resolved or cancelled.

use knife_protocol::*;
use serde_json::Value;

use super::TurnRecorder;
use crate::sessions::requests::{ApprovalOrigin, pending_approval, request_item_id};

/// What an approval is about, for [`TurnRecorder::approval_requested`].
#[derive(Clone, Debug)]
pub struct ApprovalAsk {
    /// What is asked (command, file change, …); the request's kind.
    pub kind: RuntimeRequestKind,
    /// The runtime's id of the call it guards (its tool item key).
    pub call_id: String,
    /// Tool name shown to the user (`command`, `file_change`, `mcp__knife__whoami`, …).
    pub tool: String,
    /// The command line, path or tool the user approves.
    pub subject: String,
    /// The call's arguments, as the runtime gave them.
    pub input: Value,
    /// Which rule asked (e.g. `codex approval policy`).
    pub rule: String,
    /// The proposed change as a unified diff (codex file changes, CHG-05); `None` otherwise.
    pub diff: Option<String>,
}

/// An approval the turn waits on.
pub(super) struct PendingApproval {
    request: RuntimeRequest,
    node: Node,
    item_idx: usize,
    /// The tool item it guards, if any.
    tool_idx: Option<usize>,
}

impl TurnRecorder {
    /// The turn waits on the user for the call whose tool item has key `ask.call_id`
    /// (see [`Self::approval_requested_for`]).
    pub fn approval_requested(&mut self, id: &RuntimeRequestId, ask: ApprovalAsk) {
        let tool_idx = self.index_of(&ask.call_id);
        self.approval_requested_for(id, ask, tool_idx);
    }

    /// The turn waits on the user: emits the approval node (`waiting`), the approval
    /// item (`item:<id>`, `waiting`), the guarded tool item `tool_idx` as `waiting`
    /// (when open) and the runtime request (`pending`, live on this session).
    pub fn approval_requested_for(
        &mut self,
        id: &RuntimeRequestId,
        ask: ApprovalAsk,
        tool_idx: Option<usize>,
    ) {
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
        let item_idx = self.open_item(
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
        if let Some(state) = self.items.get_mut(item_idx) {
            state.item.id = request_item_id(id);
        }
        self.send(AdapterEvent::NodeUpdated(node.clone()));
        self.emit(item_idx);
        if let Some(tool_idx) = tool_idx
            && self.is_open(tool_idx)
        {
            self.set_item_status(tool_idx, TurnItemStatus::Waiting);
        }
        self.send(AdapterEvent::RuntimeRequestUpdated(request.clone()));
        self.approvals.insert(
            id.clone(),
            PendingApproval {
                request,
                node,
                item_idx,
                tool_idx,
            },
        );
    }

    /// Whether approval `id` is pending on this turn.
    pub fn has_approval(&self, id: &RuntimeRequestId) -> bool {
        self.approvals.contains_key(id)
    }

    /// The user answered approval `id`: request `resolved` with the decision and
    /// message, node and item `completed`, the guarded tool item back to
    /// [`super::RecorderStyle::tool_after_approval`].
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
            tool_idx,
        }) = self.approvals.remove(id)
        else {
            return;
        };
        let now = self.clock.now();
        if let Some(state) = self.items.get_mut(item_idx) {
            state.open = false;
            state.item.status = item_status;
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
        self.emit(item_idx);
        node.status = node_status;
        node.completed_at = Some(now);
        self.send(AdapterEvent::NodeUpdated(node));
        request.status = status;
        request.resolved_at = Some(now);
        if let Some(answer) = answer {
            request.decision = Some(answer.decision);
            if let Some(detail) = request.tool_approval.as_mut() {
                detail.message.clone_from(&answer.message);
            }
        }
        let tool_idx = tool_idx.or_else(|| {
            let call_id = request.tool_approval.as_ref()?.call_id.as_str();
            self.index_of(call_id)
        });
        self.send(AdapterEvent::RuntimeRequestUpdated(request));
        if answer.is_some()
            && let Some(after) = self.style.tool_after_approval
            && let Some(tool_idx) = tool_idx
            && self.is_open(tool_idx)
            && self.item_at(tool_idx).map(|i| i.status) == Some(TurnItemStatus::Waiting)
        {
            self.set_item_status(tool_idx, after);
        }
    }
}
