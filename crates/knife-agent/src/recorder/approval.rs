//! The recorder's side of a tool approval: the runtime request, its node and its
//! transcript item, from `pending` / `waiting` to resolved or cancelled
//! (see `crate::approvals`).

use knife_protocol::*;
use knife_runtime::sessions::requests::{ApprovalOrigin, pending_approval, request_item_id};

use super::TurnRecorder;
use crate::approvals::request_kind;
use crate::permissions::ApprovalRequest;

/// The approval the turn waits on.
pub(super) struct PendingApproval {
    request: RuntimeRequest,
    node: Node,
    item_idx: usize,
}

impl TurnRecorder {
    /// The turn starts waiting on approval `id` for the call of tool item
    /// `tool_idx`: emits the approval node (`waiting`), the approval item
    /// (`item:<id>`, `waiting`), the tool item as `waiting`, then the request
    /// (`pending`, live on this session).
    pub(crate) fn approval_requested(
        &mut self,
        tool_idx: usize,
        ask: &ApprovalRequest,
        id: &RuntimeRequestId,
        mutating: bool,
    ) {
        let origin = ApprovalOrigin {
            thread_id: &self.id.thread_id,
            run_id: &self.id.run_id,
            provider_turn_id: &self.id.provider_turn_id,
            provider_session_id: &self.id.provider_session_id,
        };
        let (node, request) = pending_approval(
            origin,
            id,
            request_kind(&ask.tool, mutating),
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
            TurnItemKind::Approval {
                request_id: id.clone(),
                call_id: ask.call_id.clone(),
                tool: ask.tool.clone(),
                subject: ask.subject.clone(),
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
        if let Some(state) = self.items.get_mut(tool_idx) {
            state.item.status = TurnItemStatus::Waiting;
        }
        self.emit(tool_idx);
        self.send(AdapterEvent::RuntimeRequestUpdated(request.clone()));
        self.approval = Some(PendingApproval {
            request,
            node,
            item_idx,
        });
    }

    /// The user answered the pending approval: request `resolved` with the
    /// decision (and message), node and item `completed`.
    pub(crate) fn approval_answered(&mut self, answer: &RequestAnswer) {
        self.settle_approval(
            RuntimeRequestStatus::Resolved,
            NodeStatus::Completed,
            TurnItemStatus::Completed,
            Some(answer),
        );
    }

    /// The turn stopped while waiting: request `cancelled`, node and item `cancelled`.
    pub(super) fn cancel_approval(&mut self) {
        self.settle_approval(
            RuntimeRequestStatus::Cancelled,
            NodeStatus::Cancelled,
            TurnItemStatus::Cancelled,
            None,
        );
    }

    fn settle_approval(
        &mut self,
        status: RuntimeRequestStatus,
        node_status: NodeStatus,
        item_status: TurnItemStatus,
        answer: Option<&RequestAnswer>,
    ) {
        let Some(PendingApproval {
            mut request,
            mut node,
            item_idx,
        }) = self.approval.take()
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
        self.send(AdapterEvent::RuntimeRequestUpdated(request));
    }
}
