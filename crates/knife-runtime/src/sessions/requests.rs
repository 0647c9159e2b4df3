//! Settling the runtime requests of a released session (MGR-41, MGR-42): pending
//! requests that were live on it become `expired` / `not_resumable`, their node and
//! transcript item `failed`. Shared with the built-in agent's approvals and boot
//! reconciliation.

use knife_protocol::*;
use knife_store::StoreError;

use super::ReleaseReason;
use super::store::{SessionStore, WriteKind};

/// Why the session of a request went away; chooses the `not_resumable` reason text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleCause {
    /// The session failed (`runtime_error`).
    Failed,
    /// The session was closed (idle, manual, server shutdown, process gone at boot).
    Closed,
}

impl From<ReleaseReason> for SettleCause {
    fn from(reason: ReleaseReason) -> Self {
        match reason {
            ReleaseReason::RuntimeError => SettleCause::Failed,
            _ => SettleCause::Closed,
        }
    }
}

impl SettleCause {
    /// The `not_resumable.reason` text shown to the user.
    pub fn message(self) -> &'static str {
        match self {
            SettleCause::Failed => {
                "Provider session failed before this runtime request was resolved."
            }
            SettleCause::Closed => {
                "Provider session was closed before this runtime request was resolved."
            }
        }
    }
}

/// The transcript item (approval or user-input request) of runtime request
/// `request`: `item:<request id>`. Adapters must use this id for the item they
/// emit with a request so settlement finds it.
pub fn request_item_id(request: &RuntimeRequestId) -> TurnItemId {
    TurnItemId(format!("item:{request}"))
}

/// The turn an approval belongs to (ids copied into its node and request).
#[derive(Clone, Copy, Debug)]
pub struct ApprovalOrigin<'a> {
    /// The app thread whose turn asks.
    pub thread_id: &'a ThreadId,
    /// The run whose turn asks.
    pub run_id: &'a RunId,
    /// The provider turn that asks.
    pub provider_turn_id: &'a ProviderTurnId,
    /// The session that asked; the request is `live` on it and dies with it (MGR-41).
    pub provider_session_id: &'a ProviderSessionId,
}

/// A new tool approval asked at `now`: its node (`approval_request`, `waiting`,
/// `node:<request id>` under the run's root node) and its runtime request
/// (`pending`, `live` on the asking session, prompt `"<tool>: <subject>"`, the
/// [`ToolApproval`] details kept for the answer). Shared by the built-in agent and
/// the external runtimes so every approval looks the same in the event log and the
/// API; the transcript item uses [`request_item_id`].
pub fn pending_approval(
    origin: ApprovalOrigin<'_>,
    request_id: &RuntimeRequestId,
    kind: RuntimeRequestKind,
    approval: ToolApproval,
    now: Timestamp,
) -> (Node, RuntimeRequest) {
    let root = NodeId::root_of(origin.run_id);
    let node = Node {
        id: NodeId(format!("node:{request_id}")),
        thread_id: origin.thread_id.clone(),
        run_id: Some(origin.run_id.clone()),
        parent_node_id: Some(root.clone()),
        root_node_id: root,
        kind: NodeKind::ApprovalRequest,
        status: NodeStatus::Waiting,
        provider_turn_id: Some(origin.provider_turn_id.clone()),
        runtime_request_id: Some(request_id.clone()),
        started_at: Some(now),
        completed_at: None,
    };
    let request = RuntimeRequest {
        id: request_id.clone(),
        thread_id: origin.thread_id.clone(),
        run_id: Some(origin.run_id.clone()),
        node_id: node.id.clone(),
        provider_turn_id: Some(origin.provider_turn_id.clone()),
        kind,
        status: RuntimeRequestStatus::Pending,
        response_capability: ResponseCapability::Live {
            provider_session_id: origin.provider_session_id.clone(),
        },
        prompt: Some(format!("{}: {}", approval.tool, approval.subject)),
        created_at: now,
        resolved_at: None,
        decision: None,
        tool_approval: Some(approval),
    };
    (node, request)
}

/// The events that settle `request` (of the thread `projection` shows) as
/// `expired` with `not_resumable{reason}` and `resolved_at = now`, its node `failed`
/// (`completed_at = now`) and its transcript item ([`request_item_id`]) `failed`
/// (MGR-41). Shared by session release ([`expire_requests_of_session`]) and boot
/// reconciliation (`crate::boot::recovery`), so both settle a request the same way.
pub fn expire_request_events(
    request: &RuntimeRequest,
    projection: &ThreadProjection,
    reason: &str,
    now: Timestamp,
) -> Vec<DomainEvent> {
    let mut updated = request.clone();
    updated.status = RuntimeRequestStatus::Expired;
    updated.response_capability = ResponseCapability::NotResumable {
        reason: reason.to_owned(),
    };
    updated.resolved_at = Some(now);
    let mut events = vec![DomainEvent::new(
        now,
        EventBody::RuntimeRequestUpdated(updated),
    )];
    if let Some(node) = projection.nodes.iter().find(|n| n.id == request.node_id) {
        let mut node = node.clone();
        node.status = NodeStatus::Failed;
        node.completed_at = Some(now);
        events.push(DomainEvent::new(now, EventBody::NodeUpdated(node)));
    }
    let item_id = request_item_id(&request.id);
    if let Some(item) = projection.turn_items.iter().find(|i| i.id == item_id) {
        let mut item = item.clone();
        item.status = TurnItemStatus::Failed;
        item.completed_at = Some(now);
        item.updated_at = now;
        events.push(DomainEvent::new(now, EventBody::TurnItemUpdated(item)));
    }
    events
}

/// Settles every request of `threads` that is `pending`, `live` on `session` and
/// created at or before `released_at`: request `expired` with
/// `not_resumable{cause.message()}` and `resolved_at = now`, its node `failed`
/// (`completed_at = now`), its transcript item ([`request_item_id`]) `failed`. One
/// write ([`WriteKind::ReleaseRequests`]) for all; idempotent (a settled request is
/// no longer pending). Returns how many requests were settled.
///
/// Errors: the store's read or write error; nothing is written then.
pub async fn expire_requests_of_session(
    store: &dyn SessionStore,
    session: &ProviderSessionId,
    threads: &[ThreadId],
    released_at: Timestamp,
    now: Timestamp,
    cause: SettleCause,
) -> Result<usize, StoreError> {
    let mut events = Vec::new();
    let mut settled = 0;
    for thread in threads {
        let Some(projection) = store.thread_projection(thread).await? else {
            continue;
        };
        for request in &projection.runtime_requests {
            let live_here = matches!(
                &request.response_capability,
                ResponseCapability::Live { provider_session_id } if provider_session_id == session
            );
            if request.status != RuntimeRequestStatus::Pending
                || !live_here
                || request.created_at > released_at
            {
                continue;
            }
            settled += 1;
            events.extend(expire_request_events(
                request,
                &projection,
                cause.message(),
                now,
            ));
        }
    }
    if !events.is_empty() {
        store.write(WriteKind::ReleaseRequests, events).await?;
    }
    Ok(settled)
}
