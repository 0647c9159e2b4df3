//! Boot reconciliation with claims: claimed top-level threads are left to the
//! restart sweep, unclaimed and child threads are settled, pending requests expire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use knife_protocol::*;
use knife_runtime::boot::recovery::reconcile_after_restart;
use knife_runtime::execution::terminal::REQUEST_NOT_RESUMABLE;

#[tokio::test(start_paused = true)]
async fn reconcile_leaves_claimed_work_to_the_sweep_and_expires_pending_requests() {
    let h = Harness::new(Drain::Complete).await;
    let claimed = h.thread(None).await;
    let child = h.thread(Some(&claimed)).await;
    let claimed_run = h.seed_dead_run(&claimed, 0).await;
    let child_run = h.seed_dead_run(&child, 0).await;
    let now = chrono::Utc::now();
    let request = RuntimeRequest {
        id: RuntimeRequestId::from("request_1"),
        thread_id: claimed.clone(),
        run_id: Some(claimed_run.clone()),
        node_id: NodeId::root_of(&claimed_run),
        provider_turn_id: None,
        kind: RuntimeRequestKind::Command,
        status: RuntimeRequestStatus::Pending,
        response_capability: ResponseCapability::Live {
            provider_session_id: ProviderSessionId::from("provider-session:fake:x"),
        },
        prompt: Some("rm -rf target".into()),
        created_at: now,
        resolved_at: None,
        decision: None,
        tool_approval: None,
    };
    h.store
        .write(vec![DomainEvent::new(
            now,
            EventBody::RuntimeRequestUpdated(request.clone()),
        )])
        .await
        .unwrap();

    let report = reconcile_after_restart(&h.store, h.clock.as_ref())
        .await
        .unwrap();
    assert_eq!(report.requests_expired, 1);
    assert_eq!(report.runs_interrupted, vec![(child.clone(), child_run)]);
    // The claimed top-level run is untouched: the sweep resumes it.
    let run = h.store.get_run(&claimed_run).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert!(h.get(&claimed).await.is_claimed());
    let expired = h
        .store
        .get_runtime_request(&request.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(expired.status, RuntimeRequestStatus::Expired);
    assert_eq!(
        expired.response_capability,
        ResponseCapability::NotResumable {
            reason: REQUEST_NOT_RESUMABLE.into()
        }
    );
    // Idempotent.
    let again = reconcile_after_restart(&h.store, h.clock.as_ref())
        .await
        .unwrap();
    assert_eq!(again.requests_expired, 0);
    assert!(again.runs_interrupted.is_empty());
}

#[tokio::test(start_paused = true)]
async fn mgr_41_boot_reconciliation_fails_the_node_and_item_of_a_pending_approval() {
    let h = Harness::new(Drain::Complete).await;
    let thread = h.thread(None).await;
    let run = h.seed_dead_run(&thread, 0).await;
    let now = chrono::Utc::now();
    let id = RuntimeRequestId::from("request_2");
    let root = NodeId::root_of(&run);
    let node = Node {
        id: NodeId::from("node:request_2"),
        thread_id: thread.clone(),
        run_id: Some(run.clone()),
        parent_node_id: Some(root.clone()),
        root_node_id: root,
        kind: NodeKind::ApprovalRequest,
        status: NodeStatus::Waiting,
        provider_turn_id: None,
        runtime_request_id: Some(id.clone()),
        started_at: Some(now),
        completed_at: None,
    };
    let item = TurnItem {
        id: knife_runtime::sessions::requests::request_item_id(&id),
        thread_id: thread.clone(),
        run_id: Some(run.clone()),
        provider_turn_id: None,
        ordinal: TurnItem::ordinal_in_run(1, 5),
        status: TurnItemStatus::Waiting,
        started_at: Some(now),
        completed_at: None,
        updated_at: now,
        kind: TurnItemKind::Approval {
            request_id: id.clone(),
            call_id: "call_1".into(),
            tool: "bash".into(),
            subject: "make".into(),
            decision: None,
            message: None,
        },
    };
    let request = RuntimeRequest {
        id: id.clone(),
        thread_id: thread.clone(),
        run_id: Some(run.clone()),
        node_id: node.id.clone(),
        provider_turn_id: None,
        kind: RuntimeRequestKind::Command,
        status: RuntimeRequestStatus::Pending,
        response_capability: ResponseCapability::Live {
            provider_session_id: ProviderSessionId::from("provider-session:fake:y"),
        },
        prompt: Some("bash: make".into()),
        created_at: now,
        resolved_at: None,
        decision: None,
        tool_approval: None,
    };
    h.store
        .write(vec![
            DomainEvent::new(now, EventBody::NodeUpdated(node.clone())),
            DomainEvent::new(now, EventBody::TurnItemUpdated(item.clone())),
            DomainEvent::new(now, EventBody::RuntimeRequestUpdated(request)),
        ])
        .await
        .unwrap();

    let report = reconcile_after_restart(&h.store, h.clock.as_ref())
        .await
        .unwrap();
    assert_eq!(report.requests_expired, 1);
    let p = h.store.thread_projection(&thread).await.unwrap().unwrap();
    let r = p.runtime_requests.iter().find(|r| r.id == id).unwrap();
    assert_eq!(r.status, RuntimeRequestStatus::Expired);
    assert!(matches!(
        r.response_capability,
        ResponseCapability::NotResumable { .. }
    ));
    let n = p.nodes.iter().find(|n| n.id == node.id).unwrap();
    assert_eq!(n.status, NodeStatus::Failed);
    assert!(n.completed_at.is_some());
    let i = p.turn_items.iter().find(|i| i.id == item.id).unwrap();
    assert_eq!(i.status, TurnItemStatus::Failed);
}
