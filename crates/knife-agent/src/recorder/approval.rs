//! The recorder's side of a tool approval: the runtime request, its node and its
//! transcript item, from `pending` / `waiting` to resolved or cancelled
//! (see `crate::approvals`).

use knife_protocol::*;
use knife_runtime::sessions::requests::request_item_id;

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
        let now = self.clock.now();
        let root = NodeId::root_of(&self.id.run_id);
        let node = Node {
            id: NodeId(format!("node:{id}")),
            thread_id: self.id.thread_id.clone(),
            run_id: Some(self.id.run_id.clone()),
            parent_node_id: Some(root.clone()),
            root_node_id: root,
            kind: NodeKind::ApprovalRequest,
            status: NodeStatus::Waiting,
            provider_turn_id: Some(self.id.provider_turn_id.clone()),
            runtime_request_id: Some(id.clone()),
            started_at: Some(now),
            completed_at: None,
        };
        let request = RuntimeRequest {
            id: id.clone(),
            thread_id: self.id.thread_id.clone(),
            run_id: Some(self.id.run_id.clone()),
            node_id: node.id.clone(),
            provider_turn_id: Some(self.id.provider_turn_id.clone()),
            kind: request_kind(&ask.tool, mutating),
            status: RuntimeRequestStatus::Pending,
            response_capability: ResponseCapability::Live {
                provider_session_id: self.id.provider_session_id.clone(),
            },
            prompt: Some(format!("{}: {}", ask.tool, ask.subject)),
            created_at: now,
            resolved_at: None,
            decision: None,
            tool_approval: Some(ToolApproval {
                call_id: ask.call_id.clone(),
                tool: ask.tool.clone(),
                subject: ask.subject.clone(),
                input: ask.input.clone(),
                rule: ask.rule.clone(),
                message: None,
            }),
        };
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
